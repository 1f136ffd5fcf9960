package lifecycle

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopSequence: SIGTERM to non-sidecars at once, sidecars after every
// non-sidecar has exited, SIGKILL after each container's stop timeout.
func TestStopSequence(t *testing.T) {
	seed := task(noRestarts,
		withStopTimeout(sidecar(ctr("proxy", false)), 5*sec),
		ctr("app", true, dep("proxy", CondStart)),
		ctr("sync", false, dep("proxy", CondStart)))
	running := []move{
		{0, tick, s("start proxy")},
		{0, started("proxy"), s("start app", "start sync")},
		{0, started("app"), nil},
		{0, started("sync"), nil},
	}
	tests := []struct {
		name       string
		spec       TaskSpec
		moves      []move
		wantReason string
		wantStatus TaskStatus
	}{
		{
			name: "the sidecar outlives every other container",
			spec: seed,
			moves: slices.Concat(running, []move{
				{10 * sec, stop("deployment replaced"), s("term app#1", "term sync#1")},
				{11 * sec, exited("app", 0), nil},
				{12 * sec, exited("sync", 0), s("term proxy#1")},
				{13 * sec, exited("proxy", 0), s("destroy app#1", "destroy proxy#1", "destroy sync#1")},
			}),
			wantReason: "deployment replaced",
			wantStatus: TaskStopped,
		},
		{
			name: "a container that ignores SIGTERM is killed after its own stop timeout",
			spec: seed,
			moves: slices.Concat(running, []move{
				{10 * sec, stop("deployment replaced"), s("term app#1", "term sync#1")},
				{11 * sec, exited("sync", 0), nil},
				// The default stop timeout is 30 s after the app's SIGTERM.
				{40*sec - time.Millisecond, tick, nil},
				{40 * sec, tick, s("kill app#1")},
				{40 * sec, killed("app"), s("term proxy#1")},
				// The proxy's own timeout (5 s) runs from its own SIGTERM.
				{45 * sec, tick, s("kill proxy#1")},
				{46 * sec, tick, nil}, // SIGKILL is sent once
				{46 * sec, killed("proxy"), s("destroy app#1", "destroy proxy#1", "destroy sync#1")},
			}),
			wantReason: "deployment replaced",
			wantStatus: TaskStopped,
		},
		{
			name: "a sidecar with a drain signal gets it when the stop begins, and SIGTERM last",
			spec: task(noRestarts,
				withDrainSignal(withStopTimeout(sidecar(ctr("proxy", false)), 5*sec), syscall.SIGUSR1),
				ctr("app", true, dep("proxy", CondStart)),
				ctr("sync", false, dep("proxy", CondStart))),
			moves: slices.Concat(running, []move{
				{10 * sec, stop("deployment replaced"), s("term app#1", "term sync#1", "usr1 proxy#1")},
				{11 * sec, exited("app", 0), nil}, // the drain signal is sent once
				{12 * sec, exited("sync", 0), s("term proxy#1")},
				{13 * sec, exited("proxy", 0), s("destroy app#1", "destroy proxy#1", "destroy sync#1")},
			}),
			wantReason: "deployment replaced",
			wantStatus: TaskStopped,
		},
		{
			name: "a sidecar alone gets no drain signal, only its SIGTERM",
			spec: task(noRestarts,
				withDrainSignal(sidecar(ctr("proxy", false)), syscall.SIGUSR1),
				ctr("app", true, dep("proxy", CondStart))),
			moves: []move{
				{0, tick, s("start proxy")},
				{0, started("proxy"), s("start app")},
				{1 * sec, failed("app", "no such program"), s("term proxy#1")},
				{2 * sec, exited("proxy", 0), s("destroy proxy#1")},
			},
			wantReason: "no such program",
			wantStatus: TaskStopped,
		},
		{
			name: "an essential exit stops the task; the sidecar waits for the rest",
			spec: seed,
			moves: slices.Concat(running, []move{
				{10 * sec, exited("app", 1), s("term sync#1")},
				{11 * sec, exited("sync", 143), s("term proxy#1")},
				{12 * sec, exited("proxy", 0), s("destroy app#1", "destroy proxy#1", "destroy sync#1")},
			}),
			wantReason: "essential container app exited with code 1",
			wantStatus: TaskStopped,
		},
		{
			name: "the first reason is kept",
			spec: seed,
			moves: slices.Concat(running, []move{
				{10 * sec, stop("user asked"), s("term app#1", "term sync#1")},
				{11 * sec, exited("app", 1), nil},
				{11 * sec, stop("asked again"), nil},
			}),
			wantReason: "user asked",
			wantStatus: TaskRunning,
		},
		{
			name: "a container whose start is in flight is signalled once started",
			spec: seed,
			moves: []move{
				{0, tick, s("start proxy")},
				{0, started("proxy"), s("start app", "start sync")},
				{1 * sec, started("sync"), nil},
				{2 * sec, stop("stop early"), s("term sync#1")},
				{3 * sec, exited("sync", 0), nil}, // the app may yet start: the proxy waits
				{4 * sec, started("app"), s("term app#1")},
				{5 * sec, exited("app", 0), s("term proxy#1")},
				{6 * sec, exited("proxy", 0), s("destroy app#1", "destroy proxy#1", "destroy sync#1")},
			},
			wantReason: "stop early",
			wantStatus: TaskStopped,
		},
		{
			name: "containers that never started are stopped at once",
			spec: task(noRestarts, withCheck(ctr("proxy", false)), ctr("app", true, dep("proxy", CondHealthy))),
			moves: []move{
				{0, tick, s("start proxy")},
				{1 * sec, started("proxy"), nil},
				{2 * sec, stop("never mind"), s("term proxy#1")},
				{3 * sec, exited("proxy", 0), s("destroy proxy#1")},
			},
			wantReason: "never mind",
			wantStatus: TaskStopped,
		},
		{
			name: "a task stopped before anything started stops at once",
			spec: task(noRestarts, ctr("app", true)),
			moves: []move{
				{0, stop("placed by mistake"), nil},
				{1 * sec, tick, nil},
			},
			wantReason: "placed by mistake",
			wantStatus: TaskStopped,
		},
		{
			name: "an empty reason is given one",
			spec: task(noRestarts, ctr("app", true)),
			moves: []move{
				{0, tick, s("start app")},
				{1 * sec, started("app"), nil},
				{2 * sec, stop(""), s("term app#1")},
			},
			wantReason: "stop requested",
			wantStatus: TaskRunning,
		},
		{
			name: "the task stops when only finished init and non-essential containers are left",
			spec: task(noRestarts, ctr("init", true), ctr("job", false, dep("init", CondSuccess))),
			moves: []move{
				{0, tick, s("start init")},
				{0, started("init"), nil},
				{1 * sec, exited("init", 0), s("start job")},
				{1 * sec, started("job"), nil},
				{2 * sec, exited("job", 0), s("destroy init#1", "destroy job#1")},
			},
			wantReason: "every container has exited",
			wantStatus: TaskStopped,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.spec)
			h.play(tt.moves)
			if h.st.Status != tt.wantStatus {
				t.Fatalf("task %s, want %s (%s)", h.st.Status, tt.wantStatus, h.describe())
			}
			if !strings.Contains(h.st.StopReason, tt.wantReason) {
				t.Fatalf("stop reason %q, want %q", h.st.StopReason, tt.wantReason)
			}
			if tt.wantStatus == TaskStopped && !h.st.Done() {
				t.Fatalf("stopped task not done: %s", h.describe())
			}
		})
	}
}

func TestStopWakesForTheKill(t *testing.T) {
	h := newHarness(t, task(noRestarts,
		withStopTimeout(ctr("app", true), 10*sec),
		withStopTimeout(ctr("slow", false), 20*sec)))
	h.play([]move{
		{0, tick, s("start app", "start slow")},
		{0, started("app"), nil},
		{0, started("slow"), nil},
		{5 * sec, stop("bye"), s("term app#1", "term slow#1")},
	})
	if want := t0.Add(15 * sec); !h.wake.Equal(want) {
		t.Fatalf("wake at %s, want the app's kill at 15s", h.wake.Sub(t0))
	}
	h.play([]move{{15 * sec, tick, s("kill app#1")}})
	if want := t0.Add(25 * sec); !h.wake.Equal(want) {
		t.Fatalf("wake at %s, want slow's kill at 25s", h.wake.Sub(t0))
	}
	st := h.st
	if c, _ := st.Container("app"); !c.Killed || !c.TermAt.Equal(t0.Add(5*sec)) || !st.StoppingAt.Equal(t0.Add(5*sec)) {
		t.Fatalf("app: killed %v, term at %s; stopping at %s", c.Killed, c.TermAt.Sub(t0), st.StoppingAt.Sub(t0))
	}
}
