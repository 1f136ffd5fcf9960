package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/testcluster"
)

// faultTTL is the servers' heartbeat TTL: short, so that a paused fleet's
// instances go down, and their tasks LOST, within seconds.
const faultTTL = 2 * time.Second

// faultWait bounds every wait of the fault test: generous, for -race on a
// small machine shared with compilers.
const faultWait = 90 * time.Second

// The daemon under test and its task definition's two revisions.
const (
	faultEnvName = "fault"
	faultFamily  = "fault-daemon"
	faultDefV1   = faultFamily + ":1"
	faultDefV2   = faultFamily + ":2"
)

// faultTaskDef is a task definition; the simulated driver runs any exec
// command without a process. rev makes each registration a new revision.
const faultTaskDef = `family: fault-daemon
containers:
  - name: main
    driver: exec
    command: ["/bin/sleep", "%d"]
`

// faultMatches is the environment's instance group, written out in the
// test: a ready instance of cluster default, simulated, in zone-1 or
// zone-2.
func faultMatches(in histInstance) (bool, string) {
	zone := in.Attributes["zone"]
	switch {
	case in.Status != "ready":
		return false, "the instance is " + in.Status
	case in.Cluster != "default":
		return false, "the instance is in cluster " + in.Cluster
	case in.Attributes["simulated"] != "true":
		return false, "the instance is not simulated"
	case zone != "zone-1" && zone != "zone-2":
		return false, "the instance is in zone " + zone
	}
	return true, ""
}

// TestSchedulerFaults checks "one and only one" (issue 4, point 7) on a
// real cluster under faults: three `trellis server` processes, a fleet of
// 40 simulated instances and two small fleets of 3 that are partitioned
// (SIGSTOP until their instances are down and their tasks LOST, then
// SIGCONT: they return and adopt their tasks) or killed and restarted.
// A daemon environment limited by attributes is deployed fresh, updated
// with a rolling deployment (min_healthy_percent 50, min_healthy_time 1s)
// and rolled back; during each deployment the Raft leader is killed with
// SIGKILL (and later restarted), a fleet is cut off, and in the update two
// instances change attributes so that their tasks must move.
//
// From before the first task, watches record every version of every Task
// and Instance the servers stored. The replay of that history in index
// order must never show two live tasks (LOST counts) of the environment
// on one instance. At the end, every deployment has ended as expected and
// every matching instance runs exactly one task of the version in place,
// and no other instance runs one.
func TestSchedulerFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	ctx := t.Context()
	dir := t.TempDir()
	bin := trellisBinary(t)
	began := time.Now()
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: dir, Servers: 3, Extra: []string{"-heartbeat-ttl", faultTTL.String()}})
	if err != nil {
		t.Fatal(err)
	}
	f := &faultEnv{t: t, bin: bin, dir: dir, c: c, hc: &http.Client{Timeout: 10 * time.Second}}
	t.Cleanup(f.cleanup)
	// The watches follow the leader, the server the test kills: each
	// kill makes them resume elsewhere.
	hist := recordHistory(ctx, f.leaderFirst)
	t.Cleanup(hist.stop) // before f.cleanup: the watches end before the servers

	f.startFleet("fleet", "sim-", 40, nil, 3)
	sideA := f.startFleet("side-a", "pa-", 3, map[string]string{"zone": "zone-1"}, 0)
	sideB := f.startFleet("side-b", "pb-", 3, map[string]string{"zone": "zone-2"}, 0)
	var all []string
	for _, s := range f.fleets {
		all = append(all, s.Names()...)
	}
	f.waitInstances(all, "ready")
	t.Logf("cluster and %d instances ready after %v", len(all), time.Since(began).Round(time.Millisecond))

	f.register(1)
	f.register(2)
	var created struct {
		Version string `json:"version"`
	}
	f.mustCall("POST", "/v1/environments", map[string]any{
		"name":            faultEnvName,
		"type":            "daemon",
		"task_definition": faultDefV1,
		"instance_group":  map[string]any{"cluster": "default", "attributes": []string{"simulated=true", "zone in (zone-1,zone-2)"}},
		"deployment": map[string]any{
			"min_healthy_percent": 50, "min_healthy_time": "1s",
			"healthy_deadline": "2m", "progress_deadline": "3m",
		},
	}, &created)

	// 1. A fresh deployment, asked for twice as a client that retries
	// does. Once it has placed tasks: partition fleet A and kill the
	// leader; fleet A returns once its instances are down.
	phase := time.Now()
	first := f.deploy("")
	second := f.deploy("")
	f.waitInProgress("had placed tasks", func(d deploymentJSON) bool { return f.tasksOf(d.ID.Name) > 0 })
	f.partition(sideA)
	killed := f.killLeader()
	f.heal(sideA)
	f.restart(killed)
	f.waitUserDone()
	f.waitConverged(faultDefV1)
	t.Logf("fresh deployment (%s, then %s as a retry) done after %v", first, second, time.Since(phase).Round(time.Millisecond))

	// 2. A rolling update to revision 2. After its first batch: three
	// instances change attributes (one stops matching, one starts, one
	// stops and starts again), fleet B is partitioned and the leader
	// killed.
	phase = time.Now()
	f.mustCall("PUT", "/v1/environments/"+faultEnvName, map[string]any{"task_definition": faultDefV2}, nil)
	f.deploy("")
	f.waitInProgress("had completed a batch", func(d deploymentJSON) bool {
		return d.Data.Complete > 0 && d.Data.Complete < d.Data.Total
	})
	t.Logf("rolling update: a batch completed after %v", time.Since(phase).Round(time.Millisecond))
	f.setZone("sim-1", "zone-3") // zone-1: stops matching
	f.setZone("sim-3", "zone-2") // zone-3: starts matching
	f.setZone("sim-2", "zone-3") // zone-2: stops matching, and at once
	f.setZone("sim-2", "zone-2") // matches again: its old task may still be stopping
	t.Logf("rolling update: zones changed after %v", time.Since(phase).Round(time.Millisecond))
	f.partition(sideB)
	killed = f.killLeader()
	t.Logf("rolling update: leader killed after %v", time.Since(phase).Round(time.Millisecond))
	f.heal(sideB)
	t.Logf("rolling update: fleet B healed after %v", time.Since(phase).Round(time.Millisecond))
	f.restart(killed)
	f.waitUserDone()
	t.Logf("rolling update: deployment done after %v", time.Since(phase).Round(time.Millisecond))
	f.waitConverged(faultDefV2)
	t.Logf("rolling update done after %v", time.Since(phase).Round(time.Millisecond))

	// 3. A rollback to version 1. After its first batch: fleet A is
	// partitioned and the leader killed.
	phase = time.Now()
	var rb struct {
		Deployment deploymentJSON `json:"deployment"`
	}
	f.mustCall("POST", "/v1/environments/"+faultEnvName+"/rollback", map[string]any{"version": "1"}, &rb)
	f.waitInProgress("had completed a batch", func(d deploymentJSON) bool {
		return d.Data.Complete > 0 && d.Data.Complete < d.Data.Total
	})
	f.partition(sideA)
	killed = f.killLeader()
	f.heal(sideA)
	f.restart(killed)
	f.waitUserDone()
	f.waitConverged(faultDefV1)
	t.Logf("rollback (%s) done after %v", rb.Deployment.ID.Name, time.Since(phase).Round(time.Millisecond))

	// 4. Fleet B is killed: its simulated tasks vanish with it. The
	// leader is killed too, and fleet B restarts on its data directory
	// once its instances are down: its agents find their tasks gone, and
	// the scheduler repairs them, once each.
	phase = time.Now()
	sideB.Kill()
	killed = f.killLeader()
	f.waitInstances(sideB.Names(), "down")
	if err := sideB.Start(); err != nil {
		t.Fatal(err)
	}
	f.waitInstances(sideB.Names(), "ready")
	f.restart(killed)
	f.waitConverged(faultDefV1)
	t.Logf("repair after the fleet's restart done after %v", time.Since(phase).Round(time.Millisecond))

	// 5. Servers restarted from their data dirs while deployments run, as
	// an operator's restarts go: the leader is killed and comes back once
	// the deployment has moved on without it; at once a follower is
	// killed, so that its agents move, some of them to the server that
	// is still catching up. None of them may act on the list of tasks it
	// restarted from.
	phase = time.Now()
	for i, def := range []string{faultDefV2, faultDefV1, faultDefV2} {
		f.mustCall("PUT", "/v1/environments/"+faultEnvName, map[string]any{"task_definition": def}, nil)
		f.deploy("")
		d := f.waitInProgress("had placed tasks", func(d deploymentJSON) bool { return f.tasksOf(d.ID.Name) > 0 })
		placed := f.tasksOf(d.ID.Name)
		killed := f.killLeader()
		f.waitMoved(d.ID.Name, placed)
		if err := killed.Start(); err != nil {
			t.Fatal(err)
		}
		follower := f.aFollowerBut(killed)
		follower.Kill()
		f.waitLeader()
		if err := follower.Start(); err != nil {
			t.Fatal(err)
		}
		f.waitLeader()
		f.waitUserDone()
		f.waitConverged(def)
		t.Logf("restart %d: %s, then %s, restarted mid-deployment; converged on %s", i+1, killed.Name, follower.Name, def)
	}
	t.Logf("deployments across restarts done after %v", time.Since(phase).Round(time.Millisecond))

	f.checkDeployments()

	// Every server holds the same state: the same log, applied.
	f.checkReplicas()

	// The history must hold the store's last state before it is judged.
	tasks := f.listTasks()
	if err := testcluster.WaitFor(ctx, faultWait, func() bool {
		for _, tk := range tasks {
			if !hist.has(taskType.Kind, tk.ID.Name, tk.Version) {
				return false
			}
		}
		return true
	}); err != nil {
		var missing []string
		for _, tk := range tasks {
			if !hist.has(taskType.Kind, tk.ID.Name, tk.Version) {
				missing = append(missing, tk.ID.Name+"@"+tk.Version+" (history: "+hist.latestOf(taskType.Kind, tk.ID.Name)+")")
			}
		}
		t.Errorf("the watches never caught up with the store's %d tasks: missing %s; watching %s", len(tasks), strings.Join(missing, ", "), hist.where())
		for _, m := range f.running() {
			var h wire.Health
			err := f.send(t.Context(), m, "GET", "/v1/health?stale=1", nil, &h)
			t.Logf("%s health: %+v %v", m.Name, h, err)
		}
	}
	hist.stop()
	if len(hist.gaps) > 0 {
		t.Fatalf("the recorded history has gaps, so it proves nothing: %s", strings.Join(hist.gaps, "; "))
	}
	rep := hist.replay(func(env string, in histInstance, exists bool) (bool, string) {
		if !exists {
			return false, "the instance is unknown"
		}
		return faultMatches(in)
	}, func(instance string) bool {
		// Fleet B was killed once, with its tasks (step 4).
		return strings.HasPrefix(instance, sideB.Prefix)
	})
	t.Logf("history: %d events at %d indexes, %d tasks created, watches resumed %d times", rep.events, rep.indexes, rep.tasks, hist.resumes)
	if rep.tasks == 0 {
		t.Error("the history holds no task: the watches saw nothing")
	}
	for i, v := range rep.violations {
		if i == 20 {
			t.Errorf("... and %d more states with two live tasks on one instance", len(rep.violations)-i)
			break
		}
		t.Errorf("one and only one broken: %s", v)
	}
	for i, u := range rep.undone {
		if i == 20 {
			t.Errorf("... and %d more changes that undo what an agent did", len(rep.undone)-i)
			break
		}
		t.Errorf("a task's status went back: %s", u)
	}
	// A placement is decided on a state read before it is written: an
	// instance that changes in between is placed on, then its task is
	// stopped. Those are listed, not failed; the end state shows that
	// they were cleaned up.
	for _, m := range rep.misplacements {
		t.Logf("task %s created at index %d on instance %s, which did not match then: %s", m.task, m.index, m.instance, m.why)
	}
	t.Logf("fault test ran %v after the build", time.Since(began).Round(time.Millisecond))
}

// faultEnv is what the fault test drives.
type faultEnv struct {
	t      *testing.T
	bin    string
	dir    string
	c      *testcluster.Cluster
	fleets []*testcluster.Sim
	hc     *http.Client
}

// running lists the servers that run.
func (f *faultEnv) running() []*testcluster.Member {
	var out []*testcluster.Member
	for _, m := range f.c.Members {
		if m.Running() {
			out = append(out, m)
		}
	}
	return out
}

// leaderFirst lists the running servers, the leader first when one is
// known.
func (f *faultEnv) leaderFirst() []*testcluster.Member {
	ms := f.running()
	if len(ms) == 0 {
		return nil
	}
	addr, err := ms[0].Leader()
	if err != nil {
		return ms
	}
	slices.SortStableFunc(ms, func(a, b *testcluster.Member) int {
		switch {
		case a.RaftAddr == addr:
			return -1
		case b.RaftAddr == addr:
			return 1
		}
		return 0
	})
	return ms
}

func (f *faultEnv) grpcAddrs() []string {
	var out []string
	for _, m := range f.c.Members {
		out = append(out, m.GRPCAddr)
	}
	return out
}

func (f *faultEnv) startFleet(label, prefix string, n int, attrs map[string]string, zones int) *testcluster.Sim {
	f.t.Helper()
	s, err := testcluster.StartSim(testcluster.SimOptions{
		Bin: f.bin, Dir: f.dir, Label: label, Prefix: prefix, Instances: n,
		Servers: f.grpcAddrs(), Attributes: attrs, Zones: zones,
		// Tasks take a moment to start, so that deployments last long
		// enough to be interrupted.
		Extra: []string{"-start-delay", "300ms", "-log-level", "warn"},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.fleets = append(f.fleets, s)
	return s
}

// cleanup ends every process, and shows their logs' tails on failure.
func (f *faultEnv) cleanup() {
	for _, s := range f.fleets {
		s.Kill()
	}
	f.c.Stop()
	if !f.t.Failed() {
		return
	}
	for _, m := range f.c.Members {
		b, _ := os.ReadFile(m.LogPath)
		f.t.Logf("--- %s log ---\n%s", m.Name, tail(b, 4000))
	}
	for _, s := range f.fleets {
		b, _ := os.ReadFile(s.LogPath)
		f.t.Logf("--- fleet %s log ---\n%s", s.Label, tail(b, 2000))
	}
}

// --- faults ---

// killLeader kills the Raft leader with SIGKILL and waits until the
// others agree on a new one. It returns the killed server.
func (f *faultEnv) killLeader() *testcluster.Member {
	f.t.Helper()
	leader := f.waitLeader()
	leader.Kill()
	next := f.waitLeader()
	f.t.Logf("killed the leader %s; %s leads", leader.Name, next.Name)
	return leader
}

// waitLeader waits until the running servers agree on a leader that runs
// (after a leader dies, the others name it for a while).
func (f *faultEnv) waitLeader() *testcluster.Member {
	f.t.Helper()
	var leader *testcluster.Member
	err := testcluster.WaitFor(f.t.Context(), faultWait, func() bool {
		running := f.running()
		var addr string
		for _, m := range running {
			l, err := m.Leader()
			if err != nil || l == "" || (addr != "" && l != addr) {
				return false
			}
			addr = l
		}
		for _, m := range running {
			if m.RaftAddr == addr {
				leader = m
				return true
			}
		}
		return false
	})
	if err != nil {
		f.t.Fatalf("the running servers never agreed on a running leader: %v", err)
	}
	return leader
}

// checkReplicas waits until every running server's own copy of the tasks
// (an eventual read on it) equals the others', and fails with the
// difference when that never happens.
func (f *faultEnv) checkReplicas() {
	f.t.Helper()
	var diff []string
	err := testcluster.WaitFor(f.t.Context(), faultWait, func() bool {
		diff = diff[:0]
		copies := map[string]map[string]string{} // server -> task -> version
		for _, m := range f.running() {
			var out struct {
				Resources []taskJSONFull `json:"resources"`
			}
			if err := f.send(f.t.Context(), m, "GET", "/v1/resources/orchestrator/v1/Task?namespace=*", nil, &out); err != nil {
				diff = append(diff, fmt.Sprintf("%s: %v", m.Name, err))
				continue
			}
			copies[m.Name] = map[string]string{}
			for _, tk := range out.Resources {
				copies[m.Name][tk.ID.Name] = tk.Version
			}
		}
		var names []string
		for n := range copies {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, a := range names {
			for _, b := range names {
				if a >= b {
					continue
				}
				for task, v := range copies[a] {
					if copies[b][task] != v {
						diff = append(diff, fmt.Sprintf("%s has %s@%s, %s has @%s", a, task, v, b, copies[b][task]))
					}
				}
				for task, v := range copies[b] {
					if _, ok := copies[a][task]; !ok {
						diff = append(diff, fmt.Sprintf("%s has %s@%s, %s has none", b, task, v, a))
					}
				}
			}
		}
		return len(diff) == 0
	})
	if err != nil {
		f.t.Errorf("the servers' copies of the tasks differ: %s", strings.Join(diff, "; "))
	}
}

// waitMoved waits until the deployment has placed more than placed tasks
// or ended: the cluster has moved on without a server just killed.
func (f *faultEnv) waitMoved(deployment string, placed int) {
	f.t.Helper()
	if err := testcluster.WaitFor(f.t.Context(), faultWait, func() bool {
		if f.tasksOf(deployment) > placed {
			return true
		}
		for _, d := range f.deployments() {
			if d.ID.Name == deployment && d.Data.Status != "in-progress" && d.Data.Status != "pending" {
				return true
			}
		}
		return false
	}); err != nil {
		f.t.Fatalf("deployment %s never moved on: %v", deployment, err)
	}
}

// aFollowerBut returns a running server that is neither the leader nor
// except.
func (f *faultEnv) aFollowerBut(except *testcluster.Member) *testcluster.Member {
	f.t.Helper()
	leader := f.waitLeader()
	for _, m := range f.running() {
		if m != leader && m != except {
			return m
		}
	}
	f.t.Fatalf("no running follower besides %s", except.Name)
	return nil
}

// restart starts a killed server again on its data directory and waits
// until all three agree on a leader.
func (f *faultEnv) restart(m *testcluster.Member) {
	f.t.Helper()
	if err := m.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.waitLeader()
}

// partition freezes a fleet (SIGSTOP): its agents stop heartbeating and
// reporting, as if cut off.
func (f *faultEnv) partition(s *testcluster.Sim) {
	f.t.Helper()
	if err := s.Pause(); err != nil {
		f.t.Fatal(err)
	}
}

// heal waits until the servers have marked a frozen fleet's instances
// down and the tasks there LOST, then lets it run (SIGCONT): its agents
// register again and adopt their tasks.
func (f *faultEnv) heal(s *testcluster.Sim) {
	f.t.Helper()
	start := time.Now()
	f.waitInstances(s.Names(), "down")
	down := time.Since(start)
	f.waitNoTask("of the frozen fleet "+s.Label+" is still RUNNING", func(tk taskJSONFull) bool {
		return strings.HasPrefix(tk.Data.Instance, s.Prefix) && tk.Data.LastStatus == "RUNNING"
	})
	lost := time.Since(start)
	if err := s.Resume(); err != nil {
		f.t.Fatal(err)
	}
	f.waitInstances(s.Names(), "ready")
	f.t.Logf("fleet %s: down after %v, its tasks lost after %v, ready again after %v", s.Label,
		down.Round(time.Millisecond), lost.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// setZone changes an instance's zone attribute (a CAS on the instance,
// retried when its agent wrote it in between).
func (f *faultEnv) setZone(name, zone string) {
	f.t.Helper()
	path := "/v1/resources/orchestrator/v1/Instance/" + name
	for attempt := 0; ; attempt++ {
		var res wire.Resource
		f.mustCall("GET", path+"?consistent=1", nil, &res)
		var data map[string]any
		if err := json.Unmarshal(res.Data, &data); err != nil {
			f.t.Fatal(err)
		}
		attrs, _ := data["attributes"].(map[string]any)
		if attrs == nil {
			attrs = map[string]any{}
		}
		attrs["zone"] = zone
		data["attributes"] = attrs
		b, _ := json.Marshal(data)
		err := f.call("PUT", path, wire.WriteRequest{Data: b, Metadata: res.Metadata, Version: res.Version}, nil)
		if err == nil {
			return
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.code != wire.CodeConflict || attempt == 20 {
			f.t.Fatalf("setting zone=%s on %s: %v", zone, name, err)
		}
	}
}

// --- the scheduler's API ---

type deploymentJSON struct {
	ID   wire.ID `json:"id"`
	Data struct {
		Type           string `json:"type"`
		Status         string `json:"status"`
		StatusReason   string `json:"status_reason"`
		TaskDefinition string `json:"task_definition"`
		Total          int    `json:"total"`
		Complete       int    `json:"complete"`
	} `json:"data"`
}

// deploy starts a deployment of version ("" for the latest) and returns
// its id.
func (f *faultEnv) deploy(version string) string {
	f.t.Helper()
	var out struct {
		Deployment deploymentJSON `json:"deployment"`
	}
	f.mustCall("POST", "/v1/environments/"+faultEnvName+"/deployments", map[string]string{"version": version}, &out)
	return out.Deployment.ID.Name
}

func (f *faultEnv) deployments() []deploymentJSON {
	f.t.Helper()
	var out struct {
		Deployments []deploymentJSON `json:"deployments"`
	}
	f.mustCall("GET", "/v1/environments/"+faultEnvName+"/deployments", nil, &out)
	return out.Deployments
}

// latestUser is the newest user deployment (deployments are listed
// latest first).
func latestUser(deps []deploymentJSON) (deploymentJSON, bool) {
	for _, d := range deps {
		if d.Data.Type == "user" {
			return d, true
		}
	}
	return deploymentJSON{}, false
}

// waitInProgress waits until a user deployment is in progress and cond
// holds of it.
func (f *faultEnv) waitInProgress(what string, cond func(deploymentJSON) bool) deploymentJSON {
	f.t.Helper()
	var deps []deploymentJSON
	var found deploymentJSON
	if err := testcluster.WaitFor(f.t.Context(), faultWait, func() bool {
		deps = f.deployments()
		for _, d := range deps {
			if d.Data.Type == "user" && d.Data.Status == "in-progress" && cond(d) {
				found = d
				return true
			}
		}
		return false
	}); err != nil {
		f.t.Fatalf("no user deployment was ever in progress and %s: last %+v", what, deps)
	}
	return found
}

// waitUserDone waits until no user deployment is pending or in progress,
// and checks that the newest one completed.
func (f *faultEnv) waitUserDone() {
	f.t.Helper()
	var deps []deploymentJSON
	if err := testcluster.WaitFor(f.t.Context(), faultWait, func() bool {
		deps = f.deployments()
		for _, d := range deps {
			if d.Data.Type == "user" && (d.Data.Status == "pending" || d.Data.Status == "in-progress") {
				return false
			}
		}
		return true
	}); err != nil {
		f.t.Fatalf("user deployments still run after %v: %+v", faultWait, deps)
	}
	if d, _ := latestUser(deps); d.Data.Status != "completed" {
		f.t.Fatalf("deployment %s ended %s (%s), want completed", d.ID.Name, d.Data.Status, d.Data.StatusReason)
	}
}

// checkDeployments checks how every deployment ended: user deployments
// completed, or were canceled for a newer one (the retried request);
// monitor deployments (new-instance, health-repair) completed.
func (f *faultEnv) checkDeployments() {
	f.t.Helper()
	var deps []deploymentJSON
	if err := testcluster.WaitFor(f.t.Context(), faultWait, func() bool {
		deps = f.deployments()
		for _, d := range deps {
			if d.Data.Status == "pending" || d.Data.Status == "in-progress" {
				return false
			}
		}
		return true
	}); err != nil {
		f.t.Errorf("deployments still run at the end: %+v", deps)
	}
	counts := map[string]int{}
	for _, d := range deps {
		counts[d.Data.Type+" "+d.Data.Status]++
		switch {
		case d.Data.Status == "completed":
		case d.Data.Type == "user" && d.Data.Status == "canceled" && strings.Contains(d.Data.StatusReason, "deployment"):
		default:
			f.t.Errorf("%s deployment %s ended %s: %s", d.Data.Type, d.ID.Name, d.Data.Status, d.Data.StatusReason)
		}
	}
	f.t.Logf("deployments: %v", counts)
}

// --- the store's state ---

type taskJSONFull struct {
	ID      wire.ID  `json:"id"`
	Version string   `json:"version"`
	Data    histTask `json:"data"` // with what its agent reported (decodeTask)
}

func (tk *taskJSONFull) UnmarshalJSON(b []byte) error {
	var raw struct {
		ID      wire.ID                    `json:"id"`
		Version string                     `json:"version"`
		Data    json.RawMessage            `json:"data"`
		Status  map[string]json.RawMessage `json:"status"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	tk.ID, tk.Version = raw.ID, raw.Version
	return decodeTask(raw.Data, raw.Status, &tk.Data)
}

type instanceJSONFull struct {
	ID     wire.ID      `json:"id"`
	Data   histInstance `json:"data"`
	Status map[string]struct {
		Data struct {
			Session string `json:"session"`
		} `json:"data"`
	} `json:"status"`
}

// listTasks lists the tasks from the leader (a strong read): the checks
// judge the cluster's state, not a follower's copy, which may lag a little
// (a server just restarted lags more), and the history is compared with
// it.
func (f *faultEnv) listTasks() []taskJSONFull {
	f.t.Helper()
	var out struct {
		Resources []taskJSONFull `json:"resources"`
	}
	f.mustCall("GET", "/v1/resources/orchestrator/v1/Task?namespace=*&consistent=1", nil, &out)
	return out.Resources
}

func (f *faultEnv) listInstances() []instanceJSONFull {
	f.t.Helper()
	var out struct {
		Resources []instanceJSONFull `json:"resources"`
	}
	f.mustCall("GET", "/v1/resources/orchestrator/v1/Instance?consistent=1", nil, &out)
	return out.Resources
}

// tasksOf counts the tasks a deployment placed.
func (f *faultEnv) tasksOf(deployment string) int {
	n := 0
	for _, tk := range f.listTasks() {
		if tk.Data.Deployment == deployment {
			n++
		}
	}
	return n
}

// waitInstances waits until every named instance has status.
func (f *faultEnv) waitInstances(names []string, status string) {
	f.t.Helper()
	var wrong []string
	if err := testcluster.WaitFor(f.t.Context(), faultWait, func() bool {
		got := map[string]string{}
		for _, in := range f.listInstances() {
			st := in.Data.Status
			if v, ok := in.Status["orchestrator-instance"]; ok && v.Data.Session == in.Data.Session && (st == "ready" || st == "draining") {
				st = "down"
			}
			got[in.ID.Name] = st
		}
		wrong = wrong[:0]
		for _, n := range names {
			if got[n] != status {
				wrong = append(wrong, n+"="+got[n])
			}
		}
		return len(wrong) == 0
	}); err != nil {
		f.t.Fatalf("instances never all %s: %s", status, strings.Join(wrong, ", "))
	}
}

// waitNoTask waits until no task satisfies bad.
func (f *faultEnv) waitNoTask(what string, bad func(taskJSONFull) bool) {
	f.t.Helper()
	var found []string
	if err := testcluster.WaitFor(f.t.Context(), faultWait, func() bool {
		found = found[:0]
		for _, tk := range f.listTasks() {
			if bad(tk) {
				found = append(found, tk.ID.Name)
			}
		}
		return len(found) == 0
	}); err != nil {
		f.t.Fatalf("tasks still exist that %s: %v", what, found)
	}
}

// waitConverged waits until every matching instance runs exactly one live
// task of the environment, RUNNING the task definition def, and no other
// instance runs one.
func (f *faultEnv) waitConverged(def string) {
	f.t.Helper()
	var problems []string
	if err := testcluster.WaitFor(f.t.Context(), faultWait, func() bool {
		live := map[string][]taskJSONFull{}
		for _, tk := range f.listTasks() {
			if tk.Data.Environment == faultEnvName && tk.Data.live() {
				live[tk.Data.Instance] = append(live[tk.Data.Instance], tk)
			}
		}
		problems = problems[:0]
		seen := map[string]bool{}
		for _, in := range f.listInstances() {
			seen[in.ID.Name] = true
			here := live[in.ID.Name]
			if ok, why := faultMatches(in.Data); !ok {
				if len(here) > 0 {
					problems = append(problems, fmt.Sprintf("%s does not match (%s) but runs %s", in.ID.Name, why, here[0].ID.Name))
				}
				continue
			}
			switch {
			case len(here) != 1:
				problems = append(problems, fmt.Sprintf("%s matches and runs %d live tasks", in.ID.Name, len(here)))
			case here[0].Data.TaskDefinition != def || here[0].Data.LastStatus != "RUNNING" || here[0].Data.DesiredStatus != "RUNNING":
				d := here[0].Data
				problems = append(problems, fmt.Sprintf("%s runs %s %s (desired %s, last %s)", in.ID.Name, here[0].ID.Name, d.TaskDefinition, d.DesiredStatus, d.LastStatus))
			}
		}
		for name, here := range live {
			if !seen[name] {
				problems = append(problems, fmt.Sprintf("unknown instance %s runs %s", name, here[0].ID.Name))
			}
		}
		slices.Sort(problems)
		return len(problems) == 0
	}); err != nil {
		f.t.Fatalf("the environment never converged on %s: %s", def, strings.Join(problems, "; "))
	}
}

// register registers revision rev of the task definition with the CLI.
func (f *faultEnv) register(rev int) {
	f.t.Helper()
	path := filepath.Join(f.dir, fmt.Sprintf("fault-daemon-%d.yaml", rev))
	if err := os.WriteFile(path, fmt.Appendf(nil, faultTaskDef, 3600+rev), 0o644); err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.bin, "taskdef", "register", "-f", path)
	cmd.Env = append(os.Environ(), "TRELLIS_ADDR="+f.running()[0].HTTPAddr)
	out, err := cmd.CombinedOutput()
	if want := fmt.Sprintf("registered %s:%d", faultFamily, rev); err != nil || !strings.Contains(string(out), want) {
		f.t.Fatalf("taskdef register: %v: %s (want %q)", err, out, want)
	}
}

// --- HTTP ---

// apiError is an error response.
type apiError struct {
	status int
	code   string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

// casWrite: body is a write of a version read before (a client's own
// compare-and-swap).
func casWrite(body any) bool {
	w, ok := body.(wire.WriteRequest)
	return ok && w.Version != ""
}

func (f *faultEnv) mustCall(method, path string, body, out any) {
	f.t.Helper()
	if err := f.call(method, path, body, out); err != nil {
		f.t.Fatal(err)
	}
}

// call sends a request to a running server, and again to the next while
// none serves it: the server died, there is no leader yet, or a write
// lost a compare-and-swap to the scheduler (a conflict writes nothing). A
// write that names the version it replaces gets its conflict back at once:
// sending it again cannot succeed; the caller reads again.
// A request retried after its connection broke may have been applied:
// that is one of the faults under test, and the checks allow for it.
func (f *faultEnv) call(method, path string, body, out any) error {
	ctx := f.t.Context()
	began := time.Now()
	deadline := began.Add(faultWait)
	var last error
	var failed []string // what each failed attempt got, said when the call was slow
	defer func() {
		if took := time.Since(began); took > 5*time.Second {
			f.t.Logf("%s %s took %v: %s", method, path, took.Round(time.Millisecond), strings.Join(failed, "; "))
		}
	}()
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s %s: not served within %v: %w", method, path, faultWait, last)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		ms := f.running()
		if len(ms) == 0 {
			last = errors.New("no server runs")
			continue
		}
		err := f.send(ctx, ms[attempt%len(ms)], method, path, body, out)
		if err == nil {
			return nil
		}
		last = err
		failed = append(failed, fmt.Sprintf("%v after %v", err, time.Since(began).Round(time.Millisecond)))
		var ae *apiError
		if errors.As(err, &ae) && ae.status < 500 && (ae.code != wire.CodeConflict || method == "GET" || casWrite(body)) {
			return err
		}
	}
}

func (f *faultEnv) send(ctx context.Context, m *testcluster.Member, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+m.HTTPAddr+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e wire.Error
		_ = json.Unmarshal(b, &e)
		return &apiError{status: resp.StatusCode, code: e.Code, msg: fmt.Sprintf("%s %s on %s: HTTP %d: %s", method, path, m.Name, resp.StatusCode, strings.TrimSpace(string(b)))}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}
