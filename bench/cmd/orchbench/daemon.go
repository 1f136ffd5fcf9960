package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"trellis.dev/trellis/bench/internal/report"

	"trellis.dev/trellis/internal/client"
	schedclient "trellis.dev/trellis/internal/scheduler/client"
	"trellis.dev/trellis/internal/testcluster"
)

// daemonZones: the daemon cell's fleet carries zone-1 ... zone-5, so that
// the small deployment (zone=zone-1) is a fifth of it: 1,000 of 5,000.
const daemonZones = 5

// The daemon cell's joining fleet: how fast its instances start (so that
// joins, and the deaths that follow, come one by one rather than all at
// once), and when each of its tasks exits by itself.
const (
	joinStartRate = 10
	joinExitAfter = 8 * time.Second
)

// deployRun is one timed deployment.
type deployRun struct {
	label     string
	env       string
	total     int           // instances the deployment brought to its version
	batchSize int           // from the Deployment
	took      time.Duration // StartDeployment sent → completed seen on a watch
	accepted  time.Duration // StartDeployment sent → its answer
	// serverSpan is the Deployment's own start_time → end_time (the
	// leader's clock): the time it was in progress.
	serverSpan time.Duration
	// cpu is the CPU time each measured process used over took.
	cpu []procCPU
	// downs counts instances marked down (missed heartbeats) while it
	// ran; leaderChanged, whether the leader changed.
	downs         int
	leaderChanged bool
}

// procCPU is the CPU time one process used over an interval.
type procCPU struct {
	watched
	used time.Duration
}

func (d deployRun) perSec() float64 { return float64(d.total) / d.took.Seconds() }

// batches is how many batches a rolling deployment took.
func (d deployRun) batches() int {
	if d.batchSize <= 0 {
		return 1
	}
	return (d.total + d.batchSize - 1) / d.batchSize
}

// daemonResult is what the daemon cell measured of Trellis.
type daemonResult struct {
	instances  int
	register   time.Duration
	fresh      []deployRun // the small fleet's fifth, then all of it
	rolling    deployRun
	third      deployRun // the third environment, untimed as a target
	idle       *window   // no environment
	active     *window   // three active environments
	joins      []time.Duration
	repairs    []time.Duration
	leaderNote string
	downs      int // instances marked down over the whole cell
}

// trellisDaemon runs the daemon cell on Trellis: 3 servers, `trellis sim
// -instances N -zones 5`, then the daemon scheduler's deployments, leader
// CPU, and the monitors' reaction to joining instances and dying tasks.
func (b *bench) trellisDaemon(ctx context.Context) (*daemonResult, error) {
	ps := newProcs(b.cellDir("daemon-trellis"), b.runID)
	defer ps.cleanup()
	servers, leader, err := startTrellis(ctx, ps, b.trellis, 3)
	if err != nil {
		return nil, err
	}
	a, err := dial(leader.grpcAddr)
	if err != nil {
		return nil, err
	}
	defer a.close()
	for _, d := range []struct {
		family string
		rev    int64
	}{{"daemon-a", 1}, {"daemon-a", 2}, {"daemon-b", 1}, {"daemon-c", 1}} {
		if err := a.registerSimDef(ctx, d.family, d.rev); err != nil {
			return nil, err
		}
	}
	iw, err := watchInstances(ctx, a.res)
	if err != nil {
		return nil, err
	}
	r := &daemonResult{instances: b.daemonInstances}
	t0 := time.Now()
	sim, err := startSim(ps, b.trellis, "sim", "sim-", b.daemonInstances, servers, "-zones", strconv.Itoa(daemonZones))
	if err != nil {
		return nil, err
	}
	if err := iw.waitReady(ctx, "sim-", b.daemonInstances, 10*time.Minute); err != nil {
		return nil, fmt.Errorf("sim: %w (log: %s)", err, sim.log)
	}
	r.register = time.Since(t0)
	fmt.Fprintf(b.progress, "daemon: %d instances ready in %s; settling %s\n", b.daemonInstances, report.Round(r.register), b.settle)
	if err := pause(ctx, b.settle); err != nil {
		return nil, err
	}

	watchedProcs := func() ([]watched, *server, error) {
		leader, err := trellisLeader(ctx, servers)
		if err != nil {
			return nil, nil, err
		}
		ws := serversWatched("trellis server", servers, leader)
		return append(ws, watched{label: fmt.Sprintf("trellis sim (%d agents)", b.daemonInstances), role: "client", pid: sim.pid()}), leader, nil
	}
	ws, leader, err := watchedProcs()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.progress, "daemon: leader CPU, no environment, %s\n", b.daemonWindow)
	if r.idle, err = measureWindow(ctx, b.daemonWindow, ws); err != nil {
		return nil, err
	}

	dw, err := watchDeployments(ctx, a.res, namespace)
	if err != nil {
		return nil, err
	}
	hc, err := client.New(leader.httpAddr, client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		return nil, err
	}
	sc := schedclient.New(hc)
	small := b.daemonInstances / daemonZones
	fresh := func(label string, spec schedclient.EnvironmentSpec, want int) (deployRun, error) {
		w, err := sc.CreateEnvironment(ctx, namespace, &spec)
		if err != nil {
			return deployRun{}, err
		}
		fmt.Fprintf(b.progress, "daemon: %s\n", label)
		return b.timeDeployment(ctx, sc, dw, iw, servers, ws, label, spec.Name, w.Version, want)
	}
	// Fresh deployments, with the default deployment configuration: every
	// instance places at once (there is no old task to keep), healthy as
	// soon as it runs (min_healthy_time 0s).
	for i, f := range []struct {
		label string
		spec  schedclient.EnvironmentSpec
		want  int
	}{
		{fmt.Sprintf("fresh deployment to %d instances", small), schedclient.EnvironmentSpec{Name: "daemon-small", Type: "daemon", TaskDefinition: "daemon-a:1",
			InstanceGroup: &schedclient.InstanceGroupSpec{Cluster: "default", Attributes: []string{"zone=zone-1"}}}, small},
		{fmt.Sprintf("fresh deployment to %d instances", b.daemonInstances), schedclient.EnvironmentSpec{Name: "daemon-all", Type: "daemon", TaskDefinition: "daemon-b:1",
			InstanceGroup: &schedclient.InstanceGroupSpec{Cluster: "default", Attributes: []string{"simulated=true"}}}, b.daemonInstances},
	} {
		wait := func() {}
		if i == 1 {
			wait = b.profileLeader(ctx, ps.dir, leader.httpAddr, 15, "leader-fresh-deployment")
		}
		run, err := fresh(f.label, f.spec, f.want)
		wait()
		if err != nil {
			return nil, err
		}
		r.fresh = append(r.fresh, run)
	}

	// Rolling update of the small environment to a new revision.
	mhp := int32(75)
	spec := schedclient.EnvironmentSpec{Name: "daemon-small", Type: "daemon", TaskDefinition: "daemon-a:2",
		InstanceGroup: &schedclient.InstanceGroupSpec{Cluster: "default", Attributes: []string{"zone=zone-1"}},
		Deployment:    &schedclient.DeploymentSettings{MinHealthyPercent: &mhp, MinHealthyTime: b.minHealthy.String()}}
	w, err := sc.UpdateEnvironment(ctx, namespace, spec.Name, &spec)
	if err != nil {
		return nil, err
	}
	version := w.Version
	label := fmt.Sprintf("rolling update of %d instances, min_healthy_percent 75, min_healthy_time %s", small, b.minHealthy)
	fmt.Fprintf(b.progress, "daemon: %s\n", label)
	if r.rolling, err = b.timeDeployment(ctx, sc, dw, iw, servers, ws, label, spec.Name, version, small); err != nil {
		return nil, err
	}

	// The third environment: two zones of five.
	if r.third, err = fresh(fmt.Sprintf("fresh deployment to %d instances (third environment)", 2*small),
		schedclient.EnvironmentSpec{Name: "daemon-two-zones", Type: "daemon", TaskDefinition: "daemon-c:1",
			InstanceGroup: &schedclient.InstanceGroupSpec{Cluster: "default", Attributes: []string{"zone in (zone-2,zone-3)"}}}, 2*small); err != nil {
		return nil, err
	}

	fmt.Fprintf(b.progress, "daemon: settling %s, then leader CPU with 3 active environments, %s\n", b.settle, b.daemonWindow)
	if err := pause(ctx, b.settle); err != nil {
		return nil, err
	}
	if ws, leader, err = watchedProcs(); err != nil {
		return nil, err
	}
	wait := b.profileLeader(ctx, ps.dir, leader.httpAddr, int(b.daemonWindow.Seconds()), "leader-at-rest")
	r.active, err = measureWindow(ctx, b.daemonWindow, ws)
	wait()
	if err != nil {
		return nil, err
	}
	if now, err := trellisLeader(ctx, servers); err != nil || now != leader {
		r.leaderNote = "the leader changed during the window"
	}

	// Monitors: instances that join get the task of the environment that
	// matches them all; each of those tasks then exits by itself.
	tw, err := watchEnvTasks(ctx, a.res, namespace, "daemon-all", "join-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.progress, "daemon: %d instances join, %d a second; each task exits %s after it starts\n", b.joins, joinStartRate, joinExitAfter)
	var jm0 counters
	if b.phaseMetrics {
		jm0 = readCounters(servers)
	}
	join, err := startSim(ps, b.trellis, "join", "join-", b.joins, servers,
		"-start-rate", strconv.Itoa(joinStartRate), "-exit-rate", "1", "-exit-after", joinExitAfter.String())
	if err != nil {
		return nil, err
	}
	if err := tw.waitCounts(ctx, b.joins, 3*time.Minute); err != nil {
		return nil, fmt.Errorf("joining instances: %w (log: %s)", err, join.log)
	}
	if b.phaseMetrics {
		fmt.Fprintf(b.progress, "daemon: joins and deaths: what the servers counted (summed over them):\n")
		for _, l := range phaseDelta(jm0, readCounters(servers), 60) {
			fmt.Fprintf(b.progress, "    %s\n", l)
		}
	}
	ready := iw.readyTimes("join-")
	tw.mu.Lock()
	for inst, run := range tw.firstRun {
		if at, ok := ready[inst]; ok {
			r.joins = append(r.joins, run.Sub(at))
		}
	}
	for inst, rep := range tw.replacedRun {
		r.repairs = append(r.repairs, rep.Sub(tw.died[inst]))
	}
	tw.mu.Unlock()
	r.downs = iw.downCount()
	if len(r.joins) < b.joins {
		return nil, fmt.Errorf("joining instances: %d of %d were seen ready", len(r.joins), b.joins)
	}
	return r, nil
}

// timeDeployment starts a deployment of version and waits until it is
// completed, then checks that the environment is whole (every matching
// instance runs one healthy task of it).
func (b *bench) timeDeployment(ctx context.Context, sc *schedclient.Client, dw *deploymentWatch, iw *instanceWatch, servers []*server, ws []watched,
	label, env, version string, want int) (deployRun, error) {
	run := deployRun{label: label, env: env}
	leader0, err := trellisLeader(ctx, servers)
	if err != nil {
		return run, err
	}
	downs0 := iw.downCount()
	cpu0 := make([]time.Duration, len(ws))
	for i, p := range ws {
		cpu0[i], _ = testcluster.CPUTime(p.pid)
	}
	var m0 counters
	if b.phaseMetrics {
		m0 = readCounters(servers)
	}
	t0 := time.Now()
	started, err := sc.StartDeployment(ctx, namespace, env, version)
	if err != nil {
		return run, err
	}
	if started == nil || started.ID.Name == "" {
		return run, fmt.Errorf("StartDeployment %s: the answer names no deployment", env)
	}
	id := started.ID.Name
	run.accepted = time.Since(t0)
	d, at, err := dw.waitEnded(ctx, id, 10*time.Minute)
	if err != nil {
		return run, fmt.Errorf("%s: %w", label, err)
	}
	run.took = at.Sub(t0)
	run.downs = iw.downCount() - downs0
	if leader1, err := trellisLeader(ctx, servers); err != nil || leader1 != leader0 {
		run.leaderChanged = true
	}
	for i, p := range ws {
		t, _ := testcluster.CPUTime(p.pid)
		run.cpu = append(run.cpu, procCPU{watched: p, used: t - cpu0[i]})
	}
	if b.phaseMetrics {
		fmt.Fprintf(b.progress, "daemon: %s: what the servers counted (summed over them):\n", label)
		for _, l := range phaseDelta(m0, readCounters(servers), 40) {
			fmt.Fprintf(b.progress, "    %s\n", l)
		}
	}
	if d.GetStatus() != "completed" {
		return run, fmt.Errorf("%s: deployment %s ended %s: %s", label, id, d.GetStatus(), d.GetStatusReason())
	}
	run.total, run.batchSize = int(d.GetTotal()), int(d.GetBatchSize())
	if d.GetStartTime() != nil && d.GetEndTime() != nil {
		run.serverSpan = d.GetEndTime().AsTime().Sub(d.GetStartTime().AsTime())
	}
	if run.total != want {
		return run, fmt.Errorf("%s: deployment %s covered %d instances, not %d", label, id, run.total, want)
	}
	st, err := sc.EnvironmentStatus(ctx, namespace, env)
	if err != nil {
		return run, err
	}
	if int(st.GetDesired()) != want || int(st.GetActive()) != want {
		return run, fmt.Errorf("%s: completed, but the environment says %q, not %d active of %d", label, st.GetSummary(), want, want)
	}
	fmt.Fprintf(b.progress, "daemon: %s: %s (%.0f placements/s; batch size %d; answered in %s; in progress %s by the leader's clock; CPU %s; %s)\n",
		label, report.Round(run.took), run.perSec(), run.batchSize, report.Round(run.accepted), report.Round(run.serverSpan), run.cpuSummary(), run.disruption())
	return run, nil
}

// profileLeader, when -profile is set, fetches a CPU profile of secs
// seconds from the leader's debug endpoint in the background, into the
// cell's directory as name.pprof; wait for it with the returned function.
func (b *bench) profileLeader(ctx context.Context, dir, httpAddr string, secs int, name string) (wait func()) {
	if !b.profile {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		u := fmt.Sprintf("http://%s/v1/debug/pprof/profile?seconds=%d", httpAddr, secs)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintf(b.progress, "daemon: profile %s: %v\n", name, err)
			return
		}
		defer resp.Body.Close()
		path := filepath.Join(dir, name+".pprof")
		f, err := os.Create(path)
		if err != nil {
			return
		}
		defer f.Close()
		if _, err := io.Copy(f, resp.Body); err == nil {
			fmt.Fprintf(b.progress, "daemon: leader profile %s\n", path)
		}
	}()
	return func() { <-done }
}

// cpuSummary says how much CPU the leader, the followers and the fleet
// used over the deployment, in seconds and in cores.
func (d deployRun) cpuSummary() string {
	var leader, followers, fleet time.Duration
	for _, c := range d.cpu {
		switch c.role {
		case "leader":
			leader += c.used
		case "follower":
			followers += c.used
		default:
			fleet += c.used
		}
	}
	cores := func(t time.Duration) float64 { return t.Seconds() / d.took.Seconds() }
	return fmt.Sprintf("leader %.1f s (%.2f core), followers %.1f s (%.2f), sim %.1f s (%.2f)",
		leader.Seconds(), cores(leader), followers.Seconds(), cores(followers), fleet.Seconds(), cores(fleet))
}

// disruption says whether instances were marked down or the leader
// changed while the deployment ran.
func (d deployRun) disruption() string {
	s := fmt.Sprintf("%d instances marked down", d.downs)
	if d.leaderChanged {
		s += ", **the leader changed**"
	}
	return s
}
