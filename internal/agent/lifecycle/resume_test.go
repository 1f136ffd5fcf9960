package lifecycle

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/driver"
)

// roundTrip saves and loads a state as an agent would.
func roundTrip(t *testing.T, st State) State {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var out State
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStateSurvivesJSON(t *testing.T) {
	h := newHarness(t, task(RestartPolicy{Attempts: 3, Delay: 5 * sec},
		withCheck(ctr("proxy", false)), ctr("app", true, dep("proxy", CondHealthy))))
	h.play([]move{
		{0, tick, s("start proxy")},
		{1 * sec, Started{Container: "proxy", Handle: driver.Handle{Driver: "fake", ID: "proxy#1", State: []byte("ticks=42")}}, nil},
		{2 * sec, probed("proxy", true), s("start app")},
		{3 * sec, started("app"), nil},
		{4 * sec, exited("app", 1), nil},
	})
	got := roundTrip(t, h.st)
	// Times lose their monotonic reading and location; compare them as
	// instants through a second round trip.
	if want := roundTrip(t, got); !got.sameAs(want) || got.Version != h.st.Version {
		t.Fatalf("state changed through JSON:\n got %+v\nwant %+v", got, want)
	}
	app, _ := got.Container("app")
	if app.ExitCode == nil || *app.ExitCode != 1 || !app.RestartAt.Equal(t0.Add(9*sec)) || len(app.Restarts) != 1 {
		t.Fatalf("app after JSON: %+v", app)
	}
	proxy, _ := got.Container("proxy")
	if proxy.Handle == nil || string(proxy.Handle.State) != "ticks=42" || proxy.Health.Status != "HEALTHY" {
		t.Fatalf("proxy after JSON: %+v", proxy)
	}
}

func TestResume(t *testing.T) {
	spec := task(RestartPolicy{Attempts: 1, Delay: 5 * sec},
		withStopTimeout(sidecar(ctr("proxy", false)), 10*sec),
		ctr("app", true, dep("proxy", CondStart)),
		ctr("late", false, dep("app", CondStart)))

	t.Run("running containers are recovered and timers carry over", func(t *testing.T) {
		h := newHarness(t, spec)
		h.play([]move{
			{0, tick, s("start proxy")},
			{0, started("proxy"), s("start app")},
			{0, started("app"), s("start late")}, // late's start is in flight when the agent dies
		})
		h.st = roundTrip(t, h.st)
		h.play([]move{
			{30 * sec, Resumed{}, s("recover app#1", "recover proxy#1", "start late")},
			{30 * sec, started("late"), nil},
		})
		if c := h.container("late"); c.Incarnation != 2 || c.RestartCount != 0 {
			t.Fatalf("late: incarnation %d, %d restarts; want the start asked again, not counted as a restart", c.Incarnation, c.RestartCount)
		}
	})

	t.Run("a container gone while the agent was away counts as an exit", func(t *testing.T) {
		h := newHarness(t, spec)
		h.play([]move{
			{0, tick, s("start proxy")},
			{0, started("proxy"), s("start app")},
			{0, started("app"), s("start late")},
			{0, started("late"), nil},
		})
		h.st = roundTrip(t, h.st)
		gone := driver.Exit{Code: -1, Err: fmt.Errorf("lost while the agent was away: %w", driver.ErrGone)}
		h.play([]move{
			{30 * sec, Resumed{}, s("recover app#1", "recover late#1", "recover proxy#1")},
			// The policy allows one restart.
			{30 * sec, Exited{Container: "app", Exit: gone}, nil},
			{35 * sec, tick, s("start app replacing app#1")},
			{35 * sec, started("app"), nil},
			{40 * sec, Exited{Container: "app", Exit: gone}, s("term late#1")},
		})
		if want := "essential container app exited with an unknown code (lost while the agent was away: container is gone)"; h.st.StopReason != want {
			t.Fatalf("stop reason %q, want %q", h.st.StopReason, want)
		}
		if c := h.container("app"); c.ExitCode == nil || *c.ExitCode != -1 {
			t.Fatalf("app exit code %v, want -1", c.ExitCode)
		}
	})

	t.Run("a stop in progress sends its signals again and keeps its deadlines", func(t *testing.T) {
		h := newHarness(t, spec)
		h.play([]move{
			{0, tick, s("start proxy")},
			{0, started("proxy"), s("start app")},
			{0, started("app"), s("start late")},
			{0, started("late"), nil},
			{10 * sec, stop("bye"), s("term app#1", "term late#1")},
			{11 * sec, exited("late", 0), nil},
		})
		h.st = roundTrip(t, h.st)
		h.play([]move{
			{20 * sec, Resumed{}, s("recover app#1", "recover proxy#1", "term app#1")},
			// The app's 30 s default timeout runs from its SIGTERM at 10 s.
			{39 * sec, tick, nil},
			{40 * sec, tick, s("kill app#1")},
		})
	})

	t.Run("a stopped task destroys its containers again", func(t *testing.T) {
		h := newHarness(t, spec)
		h.play([]move{
			{0, tick, s("start proxy")},
			{0, started("proxy"), s("start app")},
			{1 * sec, failed("app", "boom"), s("term proxy#1")},
			{2 * sec, exited("proxy", 0), s("destroy proxy#1")},
		})
		h.st = roundTrip(t, h.st)
		h.play([]move{{5 * sec, Resumed{}, s("destroy proxy#1")}})
		if !h.st.Done() || !strings.Contains(h.st.StopReason, "boom") {
			t.Fatalf("%s", h.describe())
		}
	})
}

func TestCheckAgainst(t *testing.T) {
	st, _ := NewState(task(noRestarts, ctr("a", true), ctr("b", false)))
	if err := st.CheckAgainst(task(noRestarts, ctr("a", true), ctr("b", false))); err != nil {
		t.Fatal(err)
	}
	for _, other := range []TaskSpec{
		task(noRestarts, ctr("a", true)),
		task(noRestarts, ctr("b", true), ctr("a", false)),
	} {
		if err := st.CheckAgainst(other); err == nil {
			t.Fatalf("state of a, b accepted for %v", other.Containers)
		}
	}
}

func TestDamagedStateIsRefused(t *testing.T) {
	spec := task(noRestarts, ctr("app", true))
	st, _ := NewState(spec)
	st.Containers[0].Phase = PhaseRunning // but no handle
	if err := st.CheckAgainst(spec); err == nil || !strings.Contains(err.Error(), "no handle") {
		t.Fatalf("running without a handle: %v", err)
	}
	d := Step(spec, st, Resumed{}, Env{Now: t0})
	if len(d.Actions) != 0 {
		t.Fatalf("Step acted on a damaged state: %v", formatActions(d.Actions))
	}
	st.Containers[0].Phase = "sleeping"
	if err := st.CheckAgainst(spec); err == nil || !strings.Contains(err.Error(), "unknown phase") {
		t.Fatalf("unknown phase: %v", err)
	}
}
