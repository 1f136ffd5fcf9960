package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/testcluster"
)

// The watch cell's task: one task of a one-container definition on the
// sim instance simInstance, whose service instance of x has the task's
// check.
const (
	simPrefix   = "cb"
	simInstance = "cb1"
	family      = "catalogbench"
	task        = "x-1"
)

// changeLimit is how long a change may take to reach every watcher
// before the cell fails.
const changeLimit = 30 * time.Second

// trellisWatch measures a check's change seen by b.watchers blocking
// queries over the 3 servers. The change is the task's check turning
// passing or critical, alternately, so that the watchers' query
// (?passing) answers one instance or none: a watcher has the change when
// it has read an answer with the new count.
func (b *bench) trellisWatch(ctx context.Context) (*watchResult, error) {
	dir := filepath.Join(b.dir, "watch")
	cl, err := b.startCluster(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	var addrs []string
	for _, m := range cl.Members {
		addrs = append(addrs, m.GRPCAddr)
	}
	sim, err := testcluster.StartSim(testcluster.SimOptions{Bin: b.trellis, Dir: dir, Label: "sim", Prefix: simPrefix, Instances: 1, Servers: addrs, Extra: []string{"-log-level", "warn"}})
	if err != nil {
		return nil, err
	}
	defer sim.Stop()
	api := cl.leaderAPI()
	session, err := agentSession(ctx, api, simInstance)
	if err != nil {
		return nil, err
	}
	si, err := registerTaskInstance(ctx, api)
	if err != nil {
		return nil, err
	}
	// The agent's proof: its instance and the session it registered.
	agentCtx := metadata.AppendToOutgoingContext(ctx, resource.AgentInstanceMetadataKey, simInstance, resource.AgentSessionMetadataKey, session)
	report := func(status string) error {
		now := timestamppb.Now()
		checks := []*pbcatalog.CheckStatus{{Name: task, Status: status, Output: "catalogbench", ChangedAt: now, CheckedAt: now}}
		payload, err := anypb.New(&pbcatalog.ChecksStatus{Checks: checks, Health: catalog.Aggregate(checks), ReportedAt: now})
		if err != nil {
			return err
		}
		resp, err := api.WriteStatuses(agentCtx, &pbresource.WriteStatusesRequest{Statuses: []*pbresource.WriteStatusRequest{{
			Id: si.GetId(), Key: catalog.AgentChecksStatusKey,
			Status: &pbresource.Status{ObservedGeneration: si.GetGeneration(), Data: payload},
		}}})
		if err != nil {
			return fmt.Errorf("write the check's status as the agent of %s: %w", simInstance, err)
		}
		if e := resp.GetResults()[0].GetError(); e != nil {
			return fmt.Errorf("write the check's status as the agent of %s: code %d: %s", simInstance, e.GetCode(), e.GetMessage())
		}
		return nil
	}
	// Critical first, so that the first change (to passing) is a change.
	if err := report(catalog.CheckCritical); err != nil {
		return nil, err
	}

	cs := &changes{watchers: b.watchers}
	wctx, stopWatchers := context.WithCancel(ctx)
	defer stopWatchers()
	client := httpClient(b.watchers/len(cl.Members) + 1)
	errs := make(chan error, b.watchers)
	for w := range b.watchers {
		base := "http://" + cl.Members[w%len(cl.Members)].HTTPAddr + "/v1/health/service/" + service + "?passing"
		go func() { errs <- consulWatcher(wctx, client, base, w, cs) }()
	}
	fmt.Fprintf(b.progress, "catalogbench: %d watchers over %d servers, %d changes\n", b.watchers, len(cl.Members), b.changes)
	r := &watchResult{watchers: b.watchers, servers: len(cl.Members)}
	var cpu *cpuMeter
	for k := range b.warmup + b.changes {
		if k == b.warmup {
			cpu = newCPUMeter(serverPIDs(cl))
			if b.profile {
				profiles := fetchProfiles(ctx, cl, dir, 10*time.Second)
				defer func() {
					if err := profiles(); err != nil {
						fmt.Fprintf(b.progress, "catalogbench: profiles: %v\n", err)
					}
				}()
			}
		}
		select {
		case err := <-errs:
			return nil, fmt.Errorf("a watcher failed: %w", err)
		default:
		}
		want, status := 1, catalog.CheckPassing
		if k%2 == 1 {
			want, status = 0, catalog.CheckCritical
		}
		c := cs.begin(want)
		start := time.Now()
		if err := report(status); err != nil {
			return nil, err
		}
		ack := time.Now()
		last, err := c.wait(ctx, changeLimit)
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", k, err)
		}
		if k >= b.warmup {
			r.record(c, start, ack, last, leaderIndex(cl))
		}
		pause(ctx, b.gap)
	}
	r.serverCPU, r.clientCPU = cpu.since()
	return r, nil
}

// pause waits gap plus up to as much again at random, so that changes
// come both right after the last one's heartbeat and away from it.
func pause(ctx context.Context, gap time.Duration) {
	if gap <= 0 {
		return
	}
	t := time.NewTimer(gap + rand.N(gap))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// consulWatcher is one Consul client's blocking query on base: it reads
// the current answer, then asks again with the index it was given, and
// reports every answer's count of instances to cs. It returns when ctx
// ends, or on an error other than that.
func consulWatcher(ctx context.Context, client *http.Client, base string, w int, cs *changes) error {
	var index uint64
	var last *change
	for ctx.Err() == nil {
		url := base
		if index > 0 {
			url += "&wait=5m&index=" + strconv.FormatUint(index, 10)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		at := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
		}
		n, err := entries(body)
		if err != nil {
			return err
		}
		if index, err = consulIndex(resp.Header.Get("X-Consul-Index")); err != nil {
			return err
		}
		cs.seen(w, n, at, &last)
	}
	return nil
}

// registerTaskInstance writes what an instance of a task on the sim
// instance needs: the Service, a task definition, the task placed on
// simInstance, and its ServiceInstance of x (owned by the task, with the
// task's check); it returns the ServiceInstance as stored.
func registerTaskInstance(ctx context.Context, api pbresource.ResourceServiceClient) (*pbresource.Resource, error) {
	if err := writeService(ctx, api, service); err != nil {
		return nil, err
	}
	def, err := anypb.New(&pborch.TaskDefinition{
		Family: family, Revision: 1,
		Containers: []*pborch.ContainerDefinition{{Name: "app", Driver: "exec", Command: []string{"sleep", "infinity"}}},
	})
	if err != nil {
		return nil, err
	}
	if _, err := writeData(ctx, api, orchestrator.TaskDefinitionID(namespace, family, 1), nil, def); err != nil {
		return nil, err
	}
	t, err := anypb.New(&pborch.Task{
		TaskDefinition: orchestrator.TaskDefinitionRef(family, 1),
		Instance:       simInstance,
		StartedBy:      "catalogbench",
		DesiredStatus:  orchestrator.StatusRunning,
	})
	if err != nil {
		return nil, err
	}
	stored, err := writeData(ctx, api, orchestrator.TaskID(namespace, task), nil, t)
	if err != nil {
		return nil, err
	}
	data, err := anypb.New(&pbcatalog.ServiceInstance{
		Service: service, Address: "127.0.0.1", Port: 8080,
		Instance: simInstance, Task: task,
		Checks: []*pbcatalog.CheckDefinition{{Name: task}},
	})
	if err != nil {
		return nil, err
	}
	return writeData(ctx, api, catalog.ServiceInstanceID(namespace, task), stored.GetId(), data)
}
