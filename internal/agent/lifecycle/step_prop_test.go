package lifecycle

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"pgregory.net/rapid"

	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/driver"
)

// genSpec draws a valid task: up to 5 containers, each depending only on
// earlier ones (so no cycles), at least one essential.
func genSpec(t *rapid.T) TaskSpec {
	n := rapid.IntRange(1, 5).Draw(t, "containers")
	conds := []Condition{CondStart, CondHealthy, CondComplete, CondSuccess}
	var cs []ContainerSpec
	for i := range n {
		c := ContainerSpec{
			Name:        fmt.Sprintf("c%d", i),
			Driver:      "fake",
			Essential:   rapid.Bool().Draw(t, "essential"),
			Sidecar:     rapid.Bool().Draw(t, "sidecar"),
			StopTimeout: time.Duration(rapid.IntRange(0, 3).Draw(t, "stop")) * 10 * time.Second,
		}
		if rapid.Bool().Draw(t, "health") {
			c.Health = &HealthCheck{TCP: "127.0.0.1:1", Retries: 2}
		}
		for j := range i {
			if rapid.IntRange(0, 2).Draw(t, "edge") == 0 {
				c.DependsOn = append(c.DependsOn, dep(fmt.Sprintf("c%d", j), rapid.SampledFrom(conds).Draw(t, "cond")))
			}
		}
		cs = append(cs, c)
	}
	cs[rapid.IntRange(0, n-1).Draw(t, "essential one")].Essential = true
	return task(RestartPolicy{
		Attempts: rapid.IntRange(0, 3).Draw(t, "attempts"),
		Interval: time.Duration(rapid.IntRange(0, 120).Draw(t, "interval")) * time.Second,
		Delay:    time.Duration(rapid.IntRange(0, 10).Draw(t, "delay")) * time.Second,
		Jitter:   rapid.Float64Range(0, 1).Draw(t, "jitter"),
	}, cs...)
}

// genEvent draws an event that a driver could report in state st.
func genEvent(t *rapid.T, st State) Event {
	var choices []Event
	choices = append(choices, Tick{}, StopRequested{Reason: "drawn"}, Resumed{})
	for _, c := range st.Containers {
		switch c.Phase {
		case PhaseStarting:
			choices = append(choices,
				Started{Container: c.Name, Incarnation: c.Incarnation,
					Handle: driver.Handle{Driver: "fake", ID: fmt.Sprintf("%s#%d", c.Name, c.Incarnation)}},
				StartFailed{Container: c.Name, Incarnation: c.Incarnation, Err: "drawn"})
		case PhaseRunning:
			choices = append(choices,
				Exited{Container: c.Name, Incarnation: c.Incarnation, Exit: driver.Exit{Code: rapid.IntRange(-1, 2).Draw(t, "code")}},
				Probed{Container: c.Name, Incarnation: c.Incarnation, Result: health.Result{Pass: rapid.Bool().Draw(t, "pass")}})
		}
	}
	// A stale event now and then.
	choices = append(choices, Exited{Container: st.Containers[0].Name, Incarnation: st.Containers[0].Incarnation + 5})
	return rapid.SampledFrom(choices).Draw(t, "event")
}

// TestStepInvariants feeds random events to random tasks and checks what
// must always hold.
func TestStepInvariants(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec := genSpec(t)
		st, err := NewState(spec)
		if err != nil {
			t.Fatalf("generated spec invalid: %v", err)
		}
		now := t0
		for range rapid.IntRange(1, 60).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "advance")) * time.Second)
			ev := genEvent(t, st)
			if _, ok := ev.(Resumed); ok {
				st = roundTripRapid(t, st)
			}
			before := st.Clone()
			d := Step(spec, st, ev, Env{Now: now, Rand: rapid.Float64Range(0, 0.999).Draw(t, "rand")})
			if !before.sameAs(st) || before.Version != st.Version {
				t.Fatalf("Step modified its input")
			}
			checkStep(t, spec, st, ev, d)
			st = d.State
		}
		// However it got here, a stop ends: containers exit when signalled
		// (or killed) and the task reaches STOPPED, every handle destroyed.
		st = Step(spec, st, StopRequested{Reason: "end"}, Env{Now: now}).State
		for range 100 {
			if st.Done() {
				return
			}
			var ev Event = Tick{}
			for _, c := range st.Containers {
				if c.Phase == PhaseStarting {
					ev = Started{Container: c.Name, Incarnation: c.Incarnation, Handle: driver.Handle{ID: c.Name}}
					break
				}
				if c.Phase == PhaseRunning && !c.TermAt.IsZero() {
					ev = Exited{Container: c.Name, Incarnation: c.Incarnation, Exit: driver.Exit{Code: 0}}
					break
				}
			}
			now = now.Add(time.Second)
			d := Step(spec, st, ev, Env{Now: now})
			checkStep(t, spec, st, ev, d)
			st = d.State
		}
		t.Fatalf("the task did not stop: %+v", st)
	})
}

func checkStep(t *rapid.T, spec TaskSpec, prev State, ev Event, d Decision) {
	st := d.State
	if changed := !prev.sameAs(st); changed != (st.Version == prev.Version+1) || (!changed && st.Version != prev.Version) {
		t.Fatalf("version %d -> %d, changed %v", prev.Version, st.Version, changed)
	}
	// Statuses only go forward.
	order := map[TaskStatus]int{TaskPending: 0, TaskRunning: 1, TaskStopped: 2}
	if order[st.Status] < order[prev.Status] {
		t.Fatalf("task status went back from %s to %s", prev.Status, st.Status)
	}
	if prev.Stopping() && !st.Stopping() {
		t.Fatal("a stopping task stopped stopping")
	}
	if st.Status == TaskStopped {
		for _, c := range st.Containers {
			if c.Phase.up() {
				t.Fatalf("task STOPPED while %s is %s", c.Name, c.Phase)
			}
		}
		if !st.Done() {
			t.Fatal("a STOPPED task left containers undestroyed")
		}
	}
	if st.Status == TaskRunning || st.Status == TaskStopped && !st.StartedAt.IsZero() {
		for i, c := range st.Containers {
			if spec.Containers[i].Essential && c.StartedAt.IsZero() && st.Status == TaskRunning {
				t.Fatalf("task RUNNING before essential %s started", c.Name)
			}
		}
	}
	othersUp := false
	for i, c := range st.Containers {
		if !spec.Containers[i].Sidecar && c.Phase.up() {
			othersUp = true
		}
	}
	for _, a := range d.Actions {
		i := -1
		for j, c := range st.Containers {
			if c.Name == a.Container {
				i = j
			}
		}
		if i < 0 {
			t.Fatalf("action on unknown container %q", a.Container)
		}
		c := st.Containers[i]
		switch a.Kind {
		case ActStart:
			if prev.Stopping() {
				t.Fatalf("start of %s while stopping", a.Container)
			}
			if c.Phase != PhaseStarting || c.Incarnation != a.Incarnation {
				t.Fatalf("start of %s, now %s incarnation %d", a.Container, c.Phase, c.Incarnation)
			}
			if c.StartedAt.IsZero() { // a first start: its dependencies hold
				for _, dp := range spec.Containers[i].DependsOn {
					dc, _ := st.Container(dp.Container)
					j := 0
					for k := range spec.Containers {
						if spec.Containers[k].Name == dp.Container {
							j = k
						}
					}
					if !met(dp.Condition, dc, spec.Containers[j].Health != nil) {
						t.Fatalf("%s started before %s was %s: %+v", c.Name, dp.Container, dp.Condition, dc)
					}
				}
			}
		case ActSignal:
			if !st.Stopping() {
				t.Fatalf("signal to %s outside a stop", a.Container)
			}
			if a.Signal == syscall.SIGTERM && spec.Containers[i].Sidecar && othersUp {
				if _, resumed := ev.(Resumed); !resumed {
					t.Fatalf("SIGTERM to sidecar %s while other containers are up", a.Container)
				}
			}
		case ActDestroy:
			if st.Status != TaskStopped {
				t.Fatalf("destroy of %s before the task stopped", a.Container)
			}
		}
	}
}

func roundTripRapid(t *rapid.T, st State) State {
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
