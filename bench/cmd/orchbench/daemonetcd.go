package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
	"trellis.dev/trellis/bench/internal/report"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/testcluster"
)

// etcdDeployRun is the etcd peer's time for the store work of one
// deployment.
type etcdDeployRun struct {
	n    int
	took time.Duration
	// members and client: CPU time the three members, and this process
	// (the clients), used over took.
	members, client time.Duration
}

func (r etcdDeployRun) perSec() float64 { return float64(r.n) / r.took.Seconds() }

// etcdDaemon runs the daemon cell's peer: etcd (3 members) doing the raw
// store work of a fresh deployment to n instances, for each n of sizes.
// The scheduler's part: n tasks created in transactions of b.daemonBatch
// puts, each put conditional on the key not existing (a create), one
// transaction at a time from the leader's client. The agents' part: as
// soon as a transaction is acknowledged, one client per task (n
// concurrent, spread over the three members as the agents are over the
// servers) writes the task's RUNNING report, conditional on the version
// it was created with. Values are the Task messages Trellis stores,
// encoded the same way. Nothing else: no scheduling decision, no agent,
// no watch, so this is a floor for the same writes, not a scheduler.
// Meanwhile, as in the Trellis cell, a fleet is alive: one lease per
// instance kept alive from this process, as the fleet cell's peer does.
func (b *bench) etcdDaemon(ctx context.Context, sizes []int) ([]etcdDeployRun, error) {
	ps := newProcs(b.cellDir("daemon-etcd"), b.runID)
	defer ps.cleanup()
	// etcd refuses transactions of more than 128 operations unless told.
	members, err := startEtcd(ctx, ps, b.etcd, 3, "--max-txn-ops", strconv.Itoa(max(128, b.daemonBatch)))
	if err != nil {
		return nil, err
	}
	clis, err := dialEtcd(members)
	if err != nil {
		return nil, err
	}
	defer closeEtcd(clis)
	leader, err := etcdLeader(ctx, clis[0], members)
	if err != nil {
		return nil, err
	}
	var lcli *clientv3.Client
	for i, m := range members {
		if m == leader {
			lcli = clis[i]
		}
	}
	kctx, stopLeases := context.WithCancel(ctx)
	defer stopLeases()
	k := &leaseKeeper{}
	if err := k.keepMany(ctx, kctx, clis, "/instances/sim-", b.daemonInstances); err != nil {
		return nil, err
	}
	fmt.Fprintf(b.progress, "etcd: %d leases kept alive; settling %s\n", b.daemonInstances, b.settle)
	if err := pause(ctx, b.settle); err != nil {
		return nil, err
	}
	pids := []int{os.Getpid()}
	for _, m := range members {
		pids = append(pids, m.pid())
	}
	var runs []etcdDeployRun
	for _, n := range sizes {
		before := make([]time.Duration, len(pids))
		for i, pid := range pids {
			before[i], _ = testcluster.CPUTime(pid)
		}
		took, err := etcdDeployStore(ctx, lcli, clis, fmt.Sprintf("/tasks/deploy-%d/", n), n, b.daemonBatch)
		if err != nil {
			return nil, err
		}
		run := etcdDeployRun{n: n, took: took}
		for i, pid := range pids {
			t, _ := testcluster.CPUTime(pid)
			used := t - before[i]
			if i == 0 {
				run.client = used
			} else {
				run.members += used
			}
		}
		runs = append(runs, run)
		fmt.Fprintf(b.progress, "etcd: the store work of a deployment to %d instances in %s (%.0f/s; CPU: members %.1f s, clients %.1f s)\n",
			n, report.Round(took), run.perSec(), run.members.Seconds(), run.client.Seconds())
	}
	return runs, nil
}

// taskValues are the encoded Task of instance i as placed and as
// reported running (its data, then its data and the agent's TaskStatus,
// which Trellis keeps in the task's status).
func taskValues(i int) (placed, running []byte, err error) {
	now := timestamppb.Now()
	t := &pborch.Task{
		TaskDefinition:     orchestrator.TaskDefinitionRef("daemon-b", 1),
		Instance:           fmt.Sprintf("sim-%d", i),
		StartedBy:          "scheduler",
		DesiredStatus:      orchestrator.StatusRunning,
		CreatedAt:          now,
		Environment:        "daemon-all",
		EnvironmentVersion: "0b6f0f3c-6a0e-4b8e-9d43-5c1f7c8e2a11",
		Deployment:         "4d9c2b1a-1f2e-4c3d-8e7f-6a5b4c3d2e1f",
	}
	if placed, err = proto.Marshal(t); err != nil {
		return nil, nil, err
	}
	st := &pborch.TaskStatus{LastStatus: orchestrator.StatusRunning, StartedAt: now, ReportedAt: now, Session: "session-" + strconv.Itoa(i),
		Containers: []*pborch.ContainerState{{Name: "daemon", Status: orchestrator.StatusRunning, StartedAt: now, RuntimeId: strconv.Itoa(i)}}}
	report, err := proto.Marshal(st)
	if err != nil {
		return nil, nil, err
	}
	return placed, append(append([]byte(nil), placed...), report...), nil
}

// etcdDeployStore does the store work of one deployment to n instances
// under prefix and returns how long it took, from the first create sent
// to the last report acknowledged.
func etcdDeployStore(ctx context.Context, leader *clientv3.Client, clis []*clientv3.Client, prefix string, n, batch int) (time.Duration, error) {
	placed := make([][]byte, n)
	running := make([][]byte, n)
	for i := range n {
		var err error
		if placed[i], running[i], err = taskValues(i + 1); err != nil {
			return 0, err
		}
	}
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	report := func(i int, rev int64) {
		defer wg.Done()
		key := prefix + strconv.Itoa(i)
		resp, err := clis[i%len(clis)].Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(running[i]))).Commit()
		if err == nil && !resp.Succeeded {
			err = fmt.Errorf("report of %s: the version moved", key)
		}
		if err != nil {
			select {
			case errc <- err:
			default:
			}
		}
	}
	t0 := time.Now()
	for lo := 0; lo < n; lo += batch {
		hi := min(lo+batch, n)
		var cmps []clientv3.Cmp
		var puts []clientv3.Op
		for i := lo; i < hi; i++ {
			key := prefix + strconv.Itoa(i)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
			puts = append(puts, clientv3.OpPut(key, string(placed[i])))
		}
		resp, err := leader.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			return 0, fmt.Errorf("etcd: create %d tasks: %w", hi-lo, err)
		}
		if !resp.Succeeded {
			return 0, fmt.Errorf("etcd: create %d tasks: a key existed", hi-lo)
		}
		for i := lo; i < hi; i++ {
			wg.Add(1)
			go report(i, resp.Header.GetRevision())
		}
	}
	wg.Wait()
	took := time.Since(t0)
	select {
	case err := <-errc:
		return 0, fmt.Errorf("etcd: %w", err)
	default:
	}
	return took, nil
}
