package lifecycle

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/driver"
)

// reports collects what a runner reports.
type reports struct {
	mu     sync.Mutex
	states []State
}

func (r *reports) add(s State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.states = append(r.states, s)
}

func (r *reports) last() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return State{}
	}
	return r.states[len(r.states)-1]
}

// statuses lists the task statuses reported, without repeats.
func (r *reports) statuses() []TaskStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []TaskStatus
	for _, s := range r.states {
		if len(out) == 0 || out[len(out)-1] != s.Status {
			out = append(out, s.Status)
		}
	}
	return out
}

func newTestRunner(t *testing.T, spec TaskSpec, d driver.Driver, rep *reports) *Runner {
	t.Helper()
	r, err := NewRunner(Config{
		Spec:    spec,
		Drivers: map[string]driver.Driver{"fake": d},
		Report:  rep.add,
		Rand:    func() float64 { return 0.5 },
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runAsync runs r in a goroutine; the channel gets Run's error.
func runAsync(ctx context.Context, r *Runner) <-chan error {
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return done
}

// seed000 is the task of seed 000's timelines: a client, an init container
// that registers the service, a sidecar proxy that must be healthy before
// the app starts, and a health-sync container.
func seed000() TaskSpec {
	return task(noRestarts,
		ctr("consul-client", false),
		ctr("mesh-init", false),
		ContainerSpec{Name: "sidecar-proxy", Driver: "fake", Sidecar: true, StopTimeout: 5 * time.Second,
			DependsOn: []Dependency{dep("mesh-init", CondSuccess)},
			Health:    &HealthCheck{Command: []string{"check"}, Interval: 10 * time.Second, StartPeriod: 30 * time.Second}},
		ctr("health-sync", false, dep("mesh-init", CondSuccess)),
		ctr("user-app", true, dep("sidecar-proxy", CondHealthy)),
	)
}

func TestRunnerSeed000Timeline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newFakeDriver()
		d.scripts["mesh-init"] = exitAfter(time.Second, 0)
		d.scripts["consul-client"] = drainFor(3 * time.Second)
		d.scripts["user-app"] = drainFor(2 * time.Second)
		d.scripts["sidecar-proxy"] = ignoreTerm() // seed 000's envoy-entrypoint waits for the app; make it need a kill
		d.healthyAfter["sidecar-proxy"] = 1500 * time.Millisecond
		var rep reports
		r := newTestRunner(t, seed000(), d, &rep)
		done := runAsync(t.Context(), r)

		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st := r.State(); st.Status != TaskRunning {
			t.Fatalf("task %s at 10s, want RUNNING", st.Status)
		}
		r.Stop("deployment replaced")
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		// At 12.5 s the app has exited, the client drains on: the proxy is
		// still up, and the metadata says the app has exited.
		m := r.State().Metadata()
		if !m.Exited("user-app") || m.Exited("sidecar-proxy") {
			t.Fatalf("metadata 2.5s into the stop: %+v", m)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		want := []string{
			"0s start consul-client#1",
			"0s start mesh-init#1",
			"1s exit mesh-init#1 0",
			"1s start health-sync#1",
			"1s start sidecar-proxy#1",
			// The proxy's quick start-period probes: 1 s after its start it is
			// not healthy yet, 2 s after it is, and the app starts.
			"3s start user-app#1",
			"10s signal consul-client#1 TERM",
			"10s signal health-sync#1 TERM",
			"10s signal user-app#1 TERM",
			"10s exit health-sync#1 0",
			"12s exit user-app#1 0",
			"13s exit consul-client#1 0",
			"13s signal sidecar-proxy#1 TERM",
			"18s signal sidecar-proxy#1 KILL",
			"18s exit sidecar-proxy#1 -1",
			"18s destroy consul-client#1",
			"18s destroy health-sync#1",
			"18s destroy mesh-init#1",
			"18s destroy sidecar-proxy#1",
			"18s destroy user-app#1",
		}
		got := d.timeline()
		if !sameTimeline(got, want) {
			t.Fatalf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		final := rep.last()
		if final.Status != TaskStopped || final.StopReason != "deployment replaced" || !final.Done() {
			t.Fatalf("final report: %s %q done %v", final.Status, final.StopReason, final.Done())
		}
		if got := rep.statuses(); !slices.Equal(got, []TaskStatus{TaskPending, TaskRunning, TaskStopped}) {
			t.Fatalf("reported statuses %v, want PENDING, RUNNING, STOPPED", got)
		}
		proxy, _ := final.Container("sidecar-proxy")
		if proxy.ExitSignal != 9 || !proxy.Killed || proxy.Health.Status != health.Unknown {
			t.Fatalf("proxy: %+v", proxy)
		}
		if !final.StartedAt.Equal(d.t0.Add(3*time.Second)) || !final.StoppedAt.Equal(d.t0.Add(18*time.Second)) {
			t.Fatalf("task started %s, stopped %s; want 3s and 18s", final.StartedAt.Sub(d.t0), final.StoppedAt.Sub(d.t0))
		}
	})
}

// sameTimeline compares timelines as multisets of events per instant: the
// entries of one instant come in no particular order.
func sameTimeline(got, want []string) bool {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}

func TestRunnerRestartsWithJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newFakeDriver()
		d.scripts["app"] = exitAfter(10*time.Second, 1)
		var rep reports
		spec := task(RestartPolicy{Attempts: 2, Interval: time.Hour, Delay: 4 * time.Second, Jitter: 0.5}, ctr("app", true))
		r, err := NewRunner(Config{
			Spec:    spec,
			Drivers: map[string]driver.Driver{"fake": d},
			Report:  rep.add,
			// Every step draws a number; only the exits' are used: 0.75 for
			// the first exit, 0.25 for the second.
			Rand: func() float64 {
				if time.Since(d.t0) < 20*time.Second {
					return 0.75
				}
				return 0.25
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		want := []string{
			"0s start app#1",
			"10s exit app#1 1",
			// 4 s · (1 + 0.5·(2·0.75−1)) = 5 s
			"15s destroy app#1",
			"15s start app#2",
			"25s exit app#2 1",
			// 4 s · (1 + 0.5·(2·0.25−1)) = 3 s
			"28s destroy app#2",
			"28s start app#3",
			"38s exit app#3 1",
			"38s destroy app#3",
		}
		if got := d.timeline(); !sameTimeline(got, want) {
			t.Fatalf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		final := rep.last()
		if final.StopReason != "essential container app exited with code 1" {
			t.Fatalf("stop reason %q", final.StopReason)
		}
		if c, _ := final.Container("app"); c.RestartCount != 2 {
			t.Fatalf("restart count %d, want 2", c.RestartCount)
		}
	})
}

func TestRunnerStartError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newFakeDriver()
		d.startErr["app"] = errors.New(`exec: "/usr/local/bin/web": no such file or directory`)
		var rep reports
		spec := task(noRestarts, ctr("side", false), ctr("app", true, dep("side", CondStart)), ContainerSpec{Name: "nodriver", Driver: "docker"})
		r := newTestRunner(t, spec, d, &rep)
		if err := r.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		final := rep.last()
		// Two containers fail to start at once; either reason is right.
		if final.Status != TaskStopped || !strings.Contains(final.StopReason, "failed to start") {
			t.Fatalf("final: %s %q", final.Status, final.StopReason)
		}
		// The app failed to start, or never started because the other
		// failure came first.
		c, _ := final.Container("app")
		if c.Status != ContainerStopped || !strings.Contains(c.Reason, "no such file") && c.Reason != "the task stopped before it started" {
			t.Fatalf("app: %+v", c)
		}
		n, _ := final.Container("nodriver")
		if !strings.Contains(n.Reason, `driver "docker" is not available`) {
			t.Fatalf("container of a missing driver: %+v", n)
		}
	})
}

func TestRunnerStartErrorNamesTheDriverError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newFakeDriver()
		d.startErr["app"] = errors.New(`exec: "/usr/local/bin/web": no such file or directory`)
		var rep reports
		r := newTestRunner(t, task(noRestarts, ctr("app", true)), d, &rep)
		if err := r.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		want := `container app failed to start: exec: "/usr/local/bin/web": no such file or directory`
		if got := rep.last().StopReason; got != want {
			t.Fatalf("stop reason %q, want %q", got, want)
		}
	})
}

func TestRunnerResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newFakeDriver()
		spec := task(RestartPolicy{Attempts: 1, Delay: 2 * time.Second},
			sidecar(ctr("proxy", false)),
			ctr("app", true, dep("proxy", CondStart)),
			ctr("worker", false, dep("proxy", CondStart)))
		var rep1 reports
		r1 := newTestRunner(t, spec, d, &rep1)
		ctx, cancel := context.WithCancel(t.Context())
		done := runAsync(ctx, r1)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		// The agent goes away: the runner returns, the containers run on.
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel: %v", err)
		}
		saved := roundTrip(t, rep1.last())
		if saved.Status != TaskRunning {
			t.Fatalf("saved state %s, want RUNNING", saved.Status)
		}
		// While it is away the worker's container disappears.
		d.forget("worker#1")
		time.Sleep(5 * time.Second)

		var rep2 reports
		r2 := newTestRunner(t, spec, d, &rep2)
		done2 := make(chan error, 1)
		go func() { done2 <- r2.Resume(t.Context(), saved) }()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		st := r2.State()
		w, _ := st.Container("worker")
		if w.Phase != PhaseRunning || w.RestartCount != 1 || w.Incarnation != 2 {
			t.Fatalf("worker after resume: %+v", w)
		}
		r2.Stop("bye")
		if err := <-done2; err != nil {
			t.Fatal(err)
		}
		want := []string{
			"0s start proxy#1",
			"0s start app#1",
			"0s start worker#1",
			"5s exit worker#1 -1", // forgotten (the fake kills it as it forgets)
			"10s recover app#1",
			"10s recover proxy#1",
			"12s destroy worker#1",
			"12s start worker#2",
			"15s signal app#1 TERM",
			"15s signal worker#2 TERM",
			"15s exit app#1 0",
			"15s exit worker#2 0",
			"15s signal proxy#1 TERM",
			"15s exit proxy#1 0",
			"15s destroy app#1",
			"15s destroy proxy#1",
			"15s destroy worker#2",
		}
		if got := d.timeline(); !sameTimeline(got, want) {
			t.Fatalf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if got := rep2.last(); got.Status != TaskStopped || got.StopReason != "bye" {
			t.Fatalf("final: %s %q", got.Status, got.StopReason)
		}
	})
}

func TestRunnerResumeRefusesAnotherTasksState(t *testing.T) {
	d := newFakeDriver()
	r := newTestRunner(t, task(noRestarts, ctr("app", true)), d, &reports{})
	other, _ := NewState(task(noRestarts, ctr("web", true)))
	if err := r.Resume(t.Context(), other); err == nil {
		t.Fatal("Resume accepted the state of another task")
	}
}

func TestRunnerSlowReportDoesNotHoldTheTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newFakeDriver()
		release := make(chan struct{})
		var mu sync.Mutex
		var seen []State
		r, err := NewRunner(Config{
			Spec:    task(noRestarts, ctr("app", true)),
			Drivers: map[string]driver.Driver{"fake": d},
			Report: func(s State) {
				<-release
				mu.Lock()
				seen = append(seen, s)
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		done := runAsync(t.Context(), r)
		time.Sleep(time.Second)
		synctest.Wait()
		// The report is stuck, yet the task started and stops.
		if st := r.State(); st.Status != TaskRunning {
			t.Fatalf("task %s with a stuck report, want RUNNING", st.Status)
		}
		r.Stop("bye")
		synctest.Wait()
		if st := r.State(); st.Status != TaskStopped {
			t.Fatalf("task %s with a stuck report, want STOPPED", st.Status)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// The reports in between were coalesced; the last one came through.
		mu.Lock()
		defer mu.Unlock()
		if len(seen) == 0 || seen[len(seen)-1].Status != TaskStopped || len(seen) > 3 {
			t.Fatalf("reports: %d, last %s; want a few, the last STOPPED", len(seen), seen[len(seen)-1].Status)
		}
		for i := 1; i < len(seen); i++ {
			if seen[i].Version <= seen[i-1].Version {
				t.Fatalf("report versions go %d then %d", seen[i-1].Version, seen[i].Version)
			}
		}
	})
}

func TestRunnerStopBeforeRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newFakeDriver()
		var rep reports
		r := newTestRunner(t, task(noRestarts, ctr("app", true)), d, &rep)
		r.Stop("changed my mind")
		if err := r.Run(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := rep.last(); got.Status != TaskStopped || got.StopReason != "changed my mind" {
			t.Fatalf("final: %s %q", got.Status, got.StopReason)
		}
		if err := r.Run(t.Context()); err == nil {
			t.Fatal("a runner ran twice")
		}
	})
}
