package lifecycle

import (
	"testing"
	"time"
)

func TestRestartDelay(t *testing.T) {
	tests := []struct {
		delay  time.Duration
		jitter float64
		r      float64
		want   time.Duration
	}{
		{10 * sec, 0, 0.9, 10 * sec},
		{10 * sec, 0.5, 0, 5 * sec},
		{10 * sec, 0.5, 0.5, 10 * sec},
		{10 * sec, 0.5, 0.75, 12500 * time.Millisecond},
		{10 * sec, 1, 0, 0},
		{10 * sec, 2, 0, 0},          // jitter beyond 1 is taken as 1
		{10 * sec, 0.5, 7, 15 * sec}, // r out of range is clamped
		{0, 0.5, 0.9, 0},
	}
	for _, tt := range tests {
		got := RestartPolicy{Delay: tt.delay, Jitter: tt.jitter}.delay(tt.r)
		if got != tt.want {
			t.Errorf("delay %s jitter %g r %g: %s, want %s", tt.delay, tt.jitter, tt.r, got, tt.want)
		}
	}
}

func TestNextRestart(t *testing.T) {
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	tests := []struct {
		name     string
		policy   RestartPolicy
		history  []time.Duration
		now      time.Duration
		wantOK   bool
		wantAt   time.Duration
		wantKept int
	}{
		{"no attempts", RestartPolicy{}, nil, 0, false, 0, 0},
		{"first restart", RestartPolicy{Attempts: 2, Interval: time.Minute, Delay: 5 * sec}, nil, 10 * sec, true, 15 * sec, 1},
		{"second restart", RestartPolicy{Attempts: 2, Interval: time.Minute, Delay: 5 * sec},
			[]time.Duration{10 * sec}, 20 * sec, true, 25 * sec, 2},
		{"exhausted within the interval", RestartPolicy{Attempts: 2, Interval: time.Minute},
			[]time.Duration{10 * sec, 20 * sec}, 30 * sec, false, 0, 2},
		{"old restarts leave the window", RestartPolicy{Attempts: 2, Interval: time.Minute},
			[]time.Duration{10 * sec, 20 * sec}, 70 * sec, true, 70 * sec, 2},
		{"the window edge is exclusive", RestartPolicy{Attempts: 1, Interval: time.Minute},
			[]time.Duration{10 * sec}, 70 * sec, true, 70 * sec, 1},
		{"zero interval counts every restart", RestartPolicy{Attempts: 2},
			[]time.Duration{0, time.Hour}, 48 * time.Hour, false, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hist []time.Time
			for _, d := range tt.history {
				hist = append(hist, at(d))
			}
			kept, when, ok := tt.policy.nextRestart(hist, at(tt.now), 0.5)
			if ok != tt.wantOK || len(kept) != tt.wantKept || (ok && !when.Equal(at(tt.wantAt))) {
				t.Fatalf("got ok %v at %s kept %d, want ok %v at %s kept %d",
					ok, when.Sub(t0), len(kept), tt.wantOK, tt.wantAt, tt.wantKept)
			}
		})
	}
}

// TestRestartPolicyThroughStep: restarts, each after its jittered delay,
// until the attempts of the interval are used up; then the essential
// container stops the task.
func TestRestartPolicyThroughStep(t *testing.T) {
	policy := RestartPolicy{Attempts: 2, Interval: time.Minute, Delay: 5 * sec, Jitter: 0.2}
	h := newHarness(t, task(policy, ctr("app", true), sidecar(ctr("proxy", false))))
	h.rand = 0.75 // a delay of 5 s · (1 + 0.2·0.5) = 5.5 s
	h.play([]move{
		{0, tick, s("start app", "start proxy")},
		{0, started("app"), nil},
		{0, started("proxy"), nil},
		{10 * sec, exited("app", 1), nil},
	})
	if c := h.container("app"); c.Status != ContainerStopped || !c.RestartAt.Equal(t0.Add(15500*time.Millisecond)) {
		t.Fatalf("app: %s, restart at %s; want STOPPED with a restart at 15.5s", c.Status, c.RestartAt.Sub(t0))
	}
	if !h.wake.Equal(t0.Add(15500 * time.Millisecond)) {
		t.Fatalf("wake at %s, want 15.5s", h.wake.Sub(t0))
	}
	if h.st.Status != TaskRunning || h.st.Stopping() {
		t.Fatalf("task %s (%q) while its essential container waits to restart", h.st.Status, h.st.StopReason)
	}
	h.rand = 0 // 4 s
	h.play([]move{
		{15 * sec, tick, nil},
		{15500 * time.Millisecond, tick, s("start app replacing app#1")},
		{16 * sec, started("app"), nil},
		{20 * sec, exited("app", 1), nil},
		{24 * sec, tick, s("start app replacing app#2")},
		{25 * sec, started("app"), nil},
	})
	if c := h.container("app"); c.RestartCount != 2 || c.ExitCode != nil || c.Status != ContainerRunning {
		t.Fatalf("app: %d restarts, exit code %v, %s; want 2, none, RUNNING", c.RestartCount, c.ExitCode, c.Status)
	}
	// Two restarts in the last minute (at 10 s and 20 s): the third exit is
	// final.
	h.play([]move{
		{30 * sec, exited("app", 1), s("term proxy#1")},
	})
	if h.st.StopReason != "essential container app exited with code 1" {
		t.Fatalf("stop reason %q", h.st.StopReason)
	}
}

func TestRestartWindowSlides(t *testing.T) {
	policy := RestartPolicy{Attempts: 1, Interval: time.Minute}
	h := newHarness(t, task(policy, ctr("app", true)))
	h.play([]move{
		{0, tick, s("start app")},
		{0, started("app"), nil},
		{10 * sec, exited("app", 1), s("start app replacing app#1")},
		{10 * sec, started("app"), nil},
		// 61 s later the restart at 10 s has left the window.
		{71 * sec, exited("app", 1), s("start app replacing app#2")},
		{71 * sec, started("app"), nil},
		{72 * sec, exited("app", 1), s("destroy app#3")},
	})
	if h.st.Status != TaskStopped || h.container("app").RestartCount != 2 {
		t.Fatalf("%s, want STOPPED after 2 restarts", h.describe())
	}
}

func TestNoRestartWhileStopping(t *testing.T) {
	policy := RestartPolicy{Attempts: 5, Delay: 10 * sec}
	t.Run("an exit during the stop", func(t *testing.T) {
		h := newHarness(t, task(policy, ctr("app", true)))
		h.play([]move{
			{0, tick, s("start app")},
			{0, started("app"), nil},
			{1 * sec, stop("bye"), s("term app#1")},
			{2 * sec, exited("app", 1), s("destroy app#1")},
		})
	})
	t.Run("a pending restart is dropped", func(t *testing.T) {
		h := newHarness(t, task(policy, ctr("app", true), ctr("side", false)))
		h.play([]move{
			{0, tick, s("start app", "start side")},
			{0, started("app"), nil},
			{0, started("side"), nil},
			{1 * sec, exited("side", 1), nil},
			{2 * sec, stop("bye"), s("term app#1")},
			{11 * sec, tick, nil},
			{12 * sec, exited("app", 0), s("destroy app#1", "destroy side#1")},
		})
		if c := h.container("side"); !c.RestartAt.IsZero() || c.RestartCount != 0 {
			t.Fatalf("side: restart at %s, count %d; want none", c.RestartAt, c.RestartCount)
		}
	})
}

func TestNonEssentialExhaustedStaysStopped(t *testing.T) {
	h := newHarness(t, task(RestartPolicy{Attempts: 1}, ctr("app", true), ctr("side", false)))
	h.play([]move{
		{0, tick, s("start app", "start side")},
		{0, started("app"), nil},
		{0, started("side"), nil},
		{1 * sec, exited("side", 1), s("start side replacing side#1")},
		{1 * sec, started("side"), nil},
		{2 * sec, exited("side", 1), nil},
		{100 * sec, tick, nil},
	})
	if h.st.Status != TaskRunning || h.st.Stopping() {
		t.Fatalf("%s, want the task running on", h.describe())
	}
}
