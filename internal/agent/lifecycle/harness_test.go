package lifecycle

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/driver"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Builders for specs and events, to keep the tables short.

func ctr(name string, essential bool, deps ...Dependency) ContainerSpec {
	return ContainerSpec{Name: name, Driver: "fake", Essential: essential, DependsOn: deps}
}

func sidecar(c ContainerSpec) ContainerSpec { c.Sidecar = true; return c }

func withCheck(c ContainerSpec) ContainerSpec {
	c.Health = &HealthCheck{Command: []string{"check"}, Interval: 10 * time.Second, Retries: 2}
	return c
}

func withStopTimeout(c ContainerSpec, d time.Duration) ContainerSpec { c.StopTimeout = d; return c }
func withDrainSignal(c ContainerSpec, sig syscall.Signal) ContainerSpec {
	c.DrainSignal = sig
	return c
}

func dep(name string, cond Condition) Dependency { return Dependency{Container: name, Condition: cond} }

func task(policy RestartPolicy, cs ...ContainerSpec) TaskSpec {
	return TaskSpec{TaskID: "default/t", TaskUID: "u1", Containers: cs, RestartPolicy: policy}
}

var noRestarts RestartPolicy

func started(name string) Event { return Started{Container: name} }
func failed(name, err string) Event {
	return StartFailed{Container: name, Err: err}
}
func exited(name string, code int) Event {
	return Exited{Container: name, Exit: driver.Exit{Code: code}}
}
func killed(name string) Event {
	return Exited{Container: name, Exit: driver.Exit{Code: -1, Signal: 9}}
}
func probed(name string, pass bool) Event {
	return Probed{Container: name, Result: health.Result{Pass: pass}}
}
func stop(reason string) Event { return StopRequested{Reason: reason} }

var tick = Tick{}

// harness feeds events to Step at explicit times and keeps the state; it
// fills in the incarnation of events that name none (the current one) and
// a handle "name#incarnation" for Started.
type harness struct {
	t    *testing.T
	spec TaskSpec
	st   State
	rand float64
	wake time.Time
}

func newHarness(t *testing.T, spec TaskSpec) *harness {
	t.Helper()
	st, err := NewState(spec)
	if err != nil {
		t.Fatalf("NewState: %v", err)
	}
	return &harness{t: t, spec: spec, st: st, rand: 0.5}
}

func (h *harness) incarnation(name string) int {
	c, _ := h.st.Container(name)
	return c.Incarnation
}

func (h *harness) fill(ev Event) Event {
	switch e := ev.(type) {
	case Started:
		if e.Incarnation == 0 {
			e.Incarnation = h.incarnation(e.Container)
		}
		if e.Handle.ID == "" {
			e.Handle = driver.Handle{Driver: "fake", ID: fmt.Sprintf("%s#%d", e.Container, e.Incarnation)}
		}
		return e
	case StartFailed:
		if e.Incarnation == 0 {
			e.Incarnation = h.incarnation(e.Container)
		}
		return e
	case Exited:
		if e.Incarnation == 0 {
			e.Incarnation = h.incarnation(e.Container)
		}
		return e
	case Probed:
		if e.Incarnation == 0 {
			e.Incarnation = h.incarnation(e.Container)
		}
		return e
	}
	return ev
}

// at steps with ev at t0+d and returns the actions, formatted and sorted
// (actions of one step are unordered).
func (h *harness) at(d time.Duration, ev Event) []string {
	h.t.Helper()
	before := h.st.Clone()
	dec := Step(h.spec, h.st, h.fill(ev), Env{Now: t0.Add(d), Rand: h.rand})
	if !before.sameAs(h.st) || before.Version != h.st.Version {
		h.t.Fatalf("Step modified its input state")
	}
	h.st = dec.State
	h.wake = dec.Wake
	return formatActions(dec.Actions)
}

func formatActions(as []Action) []string {
	var out []string
	for _, a := range as {
		switch a.Kind {
		case ActStart:
			s := "start " + a.Container
			if a.Previous != nil {
				s += " replacing " + a.Previous.ID
			}
			out = append(out, s)
		case ActSignal:
			word := map[syscall.Signal]string{syscall.SIGKILL: "kill", syscall.SIGTERM: "term", syscall.SIGUSR1: "usr1"}[a.Signal]
			out = append(out, fmt.Sprintf("%s %s", word, a.Handle.ID))
		default:
			out = append(out, fmt.Sprintf("%s %s", a.Kind, a.Handle.ID))
		}
	}
	slices.Sort(out)
	return out
}

// move is one row of a script: an event at a time and the actions it must
// cause.
type move struct {
	at   time.Duration
	ev   Event
	want []string
}

func (h *harness) play(moves []move) {
	h.t.Helper()
	for i, m := range moves {
		got := h.at(m.at, m.ev)
		want := slices.Clone(m.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			h.t.Fatalf("move %d (%T%+v at %s): actions %q, want %q\nstate: %s", i, m.ev, m.ev, m.at, got, want, h.describe())
		}
	}
}

func (h *harness) describe() string {
	s := fmt.Sprintf("task %s (desired %s, reason %q)", h.st.Status, h.st.DesiredStatus, h.st.StopReason)
	for _, c := range h.st.Containers {
		s += fmt.Sprintf("; %s %s/%s health %s", c.Name, c.Status, c.Phase, c.Health.Status)
	}
	return s
}

func (h *harness) container(name string) ContainerState {
	h.t.Helper()
	c, ok := h.st.Container(name)
	if !ok {
		h.t.Fatalf("no container %q", name)
	}
	return c
}

func s(xs ...string) []string { return xs }
