package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"trellis.dev/trellis/internal/orchestrator"
)

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func ready(name string, attrs ...string) InstanceView {
	m := map[string]string{}
	for _, a := range attrs {
		k, v, _ := cut(a)
		m[k] = v
	}
	return InstanceView{Name: name, Cluster: DefaultCluster, Status: orchestrator.InstanceReady, Attributes: m}
}

func cut(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '=' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func running(name, instance, def string, seq int64) TaskView {
	return TaskView{Name: name, Instance: instance, TaskDefinition: def, Desired: orchestrator.StatusRunning,
		Last: orchestrator.StatusRunning, Healthy: true, HealthySince: t0.Add(-time.Hour), CreatedAt: t0.Add(-time.Hour), Seq: seq}
}

func groupOf(t *testing.T, filters ...string) Group {
	g, err := ParseGroup("g", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range filters {
		f, err := ParseFilter(s)
		if err != nil {
			t.Fatal(err)
		}
		g.Filters = append(g.Filters, f)
	}
	return g
}

func TestPlanTable(t *testing.T) {
	target := func(replace bool, mhp int, filters ...string) Target {
		return Target{TaskDefinition: "d:2", Group: groupOf(t, filters...), Rollout: Rollout{MinHealthyPercent: mhp, HealthyDeadline: time.Minute, ProgressDeadline: time.Hour}, Replace: replace}
	}
	down := ready("down")
	down.Status = orchestrator.InstanceDown
	draining := ready("drain")
	draining.Status = orchestrator.InstanceDraining
	lost := running("t-lost", "i1", "d:2", 1)
	lost.Last = orchestrator.StatusLost
	lost.Healthy = false
	died := running("t-died", "i1", "d:2", 4)
	died.Last, died.Healthy = orchestrator.StatusStopped, false
	stopping := running("t-stopping", "i1", "d:1", 2)
	stopping.Desired = orchestrator.StatusStopped
	for _, tc := range []struct {
		name      string
		target    Target
		instances []InstanceView
		tasks     []TaskView
		places    []Placement
		stops     []Stop
	}{
		{
			name:      "a fresh environment places on every matching instance",
			target:    target(true, 75, "role=log"),
			instances: []InstanceView{ready("i1", "role=log"), ready("i2", "role=web"), ready("i3", "role=log")},
			places:    []Placement{{Instance: "i1", Seq: 1}, {Instance: "i3", Seq: 1}},
		},
		{
			name:      "up to date: nothing to do",
			target:    target(true, 75),
			instances: []InstanceView{ready("i1")},
			tasks:     []TaskView{running("t1", "i1", "d:2", 1)},
		},
		{
			name:      "a task on an instance that stopped matching is stopped; a down instance is left alone",
			target:    target(false, 75, "role=log"),
			instances: []InstanceView{ready("i1", "role=web"), down, draining},
			tasks:     []TaskView{running("t1", "i1", "d:2", 1), running("t2", "down", "d:2", 1), running("t3", "drain", "d:2", 1), running("t4", "gone", "d:2", 1)},
			stops: []Stop{{Task: "t3", Reason: ReasonDraining}, {Task: "t4", Reason: ReasonInstanceGone},
				{Task: "t1", Reason: ReasonNoLongerMatches}},
		},
		{
			name:      "nothing is placed beside a LOST task",
			target:    target(false, 75),
			instances: []InstanceView{ready("i1")},
			tasks:     []TaskView{lost},
		},
		{
			name:      "a task that stops is replaced at once, the new one naming it",
			target:    target(true, 75),
			instances: []InstanceView{ready("i1")},
			tasks:     []TaskView{stopping},
			places:    []Placement{{Instance: "i1", Seq: 3, Replaces: "t-stopping"}},
		},
		{
			name:      "nothing is placed beside the replacement of a stopping task",
			target:    target(true, 75),
			instances: []InstanceView{ready("i1")},
			tasks: []TaskView{stopping,
				{Name: "t-new", Instance: "i1", TaskDefinition: "d:2", Desired: orchestrator.StatusRunning, Last: orchestrator.StatusPending, Seq: 3}},
		},
		{
			name:      "a dead task is replaced, with the next seq, as a health repair",
			target:    target(false, 75),
			instances: []InstanceView{ready("i1")},
			tasks:     []TaskView{died},
			places:    []Placement{{Instance: "i1", Seq: 5, Repair: true}},
		},
		{
			name:      "a second live copy is stopped, keeping the target's",
			target:    target(false, 75),
			instances: []InstanceView{ready("i1")},
			tasks:     []TaskView{running("old", "i1", "d:1", 1), running("new", "i1", "d:2", 2)},
			stops:     []Stop{{Task: "old", Reason: ReasonDuplicate}},
		},
		{
			name:      "without a user deployment old tasks are kept",
			target:    target(false, 0),
			instances: []InstanceView{ready("i1"), ready("i2")},
			tasks:     []TaskView{running("t1", "i1", "d:1", 1), running("t2", "i2", "d:1", 1)},
		},
		{
			name:      "a rollout replaces a batch: 4 instances at 50% is 2",
			target:    target(true, 50),
			instances: []InstanceView{ready("i1"), ready("i2"), ready("i3"), ready("i4")},
			tasks:     []TaskView{running("t1", "i1", "d:1", 1), running("t2", "i2", "d:1", 1), running("t3", "i3", "d:1", 1), running("t4", "i4", "d:1", 1)},
			stops:     []Stop{{Task: "t1", Reason: ReasonReplaced}, {Task: "t2", Reason: ReasonReplaced}},
			places:    []Placement{{Instance: "i1", Seq: 2, Replaces: "t1"}, {Instance: "i2", Seq: 2, Replaces: "t2"}},
		},
		{
			name:      "an instance already unavailable uses up the batch",
			target:    target(true, 50),
			instances: []InstanceView{ready("i1"), ready("i2"), ready("i3"), ready("i4")},
			tasks: []TaskView{running("t1", "i1", "d:1", 1), running("t2", "i2", "d:1", 1), running("t3", "i3", "d:1", 1),
				{Name: "t4", Instance: "i4", TaskDefinition: "d:2", Desired: orchestrator.StatusRunning, Last: orchestrator.StatusPending, Seq: 2}},
			stops:  []Stop{{Task: "t1", Reason: ReasonReplaced}},
			places: []Placement{{Instance: "i1", Seq: 2, Replaces: "t1"}},
		},
		{
			name:      "an unhealthy old task is replaced at once, beyond the batch",
			target:    target(true, 100),
			instances: []InstanceView{ready("i1"), ready("i2")},
			tasks: []TaskView{running("t1", "i1", "d:1", 1),
				{Name: "t2", Instance: "i2", TaskDefinition: "d:1", Desired: orchestrator.StatusRunning, Last: orchestrator.StatusRunning, Health: orchestrator.HealthUnhealthy, Seq: 1}},
			stops:  []Stop{{Task: "t2", Reason: ReasonReplaced}},
			places: []Placement{{Instance: "i2", Seq: 2, Replaces: "t2"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := ComputePlan(tc.target, tc.instances, tc.tasks, t0)
			if fmt.Sprint(p.Places) != fmt.Sprint(tc.places) {
				t.Errorf("places = %v, want %v", p.Places, tc.places)
			}
			if fmt.Sprint(p.Stops) != fmt.Sprint(tc.stops) {
				t.Errorf("stops = %v, want %v", p.Stops, tc.stops)
			}
		})
	}
}

func TestBatchSize(t *testing.T) {
	for _, tc := range []struct{ mhp, n, want int }{
		{75, 1000, 250}, {75, 4, 1}, {75, 3, 1}, {100, 10, 1}, {0, 10, 10}, {50, 5, 2}, {75, 0, 1},
	} {
		if got := (Rollout{MinHealthyPercent: tc.mhp}).BatchSize(tc.n); got != tc.want {
			t.Errorf("BatchSize(mhp %d, n %d) = %d, want %d", tc.mhp, tc.n, got, tc.want)
		}
	}
}

func TestMinHealthyTimeHoldsTheBatch(t *testing.T) {
	target := Target{TaskDefinition: "d:2", Group: groupOf(t), Rollout: Rollout{MinHealthyPercent: 50, MinHealthyTime: 10 * time.Second, HealthyDeadline: time.Minute, ProgressDeadline: time.Hour}, Replace: true}
	fresh := running("n1", "i1", "d:2", 2)
	fresh.HealthySince = t0.Add(-4 * time.Second)
	tasks := []TaskView{fresh, running("t2", "i2", "d:1", 1)}
	instances := []InstanceView{ready("i1"), ready("i2")}
	p := ComputePlan(target, instances, tasks, t0)
	if len(p.Stops) != 0 {
		t.Fatalf("replaced %v while the new task on i1 has been healthy 4s of 10s", p.Stops)
	}
	if want := t0.Add(6 * time.Second); !p.Recheck.Equal(want) {
		t.Fatalf("recheck at %v, want %v", p.Recheck, want)
	}
	p = ComputePlan(target, instances, tasks, t0.Add(6*time.Second))
	if len(p.Stops) != 1 || p.Stops[0].Task != "t2" {
		t.Fatalf("at min_healthy_time the next batch should start: stops %v", p.Stops)
	}
}

// world is a model of a fleet and an environment's tasks for the
// property test: the plan is applied to it, and agents act on it.
type world struct {
	instances map[string]*InstanceView
	tasks     []*TaskView
	now       time.Time
}

func (w *world) views() ([]InstanceView, []TaskView) {
	var ins []InstanceView
	for _, in := range w.instances {
		ins = append(ins, *in)
	}
	slices.SortFunc(ins, func(a, b InstanceView) int { return strings.Compare(a.Name, b.Name) })
	var ts []TaskView
	for _, t := range w.tasks {
		ts = append(ts, *t)
	}
	return ins, ts
}

// countByInstance counts, per instance, the tasks for which keep holds.
func countByInstance(tasks []*TaskView, keep func(*TaskView) bool) map[string]int {
	m := map[string]int{}
	for _, t := range tasks {
		if keep(t) {
			m[t.Instance]++
		}
	}
	return m
}

// planOverRelevantAgrees checks that a plan over the instances
// Matching.Relevant keeps decides what the plan over all of them decided,
// and lists the same instances but those with nothing to do.
func planOverRelevantAgrees(rt *rapid.T, step int, all, relevant Plan) {
	if !slices.Equal(all.Places, relevant.Places) || !slices.Equal(all.Stops, relevant.Stops) {
		rt.Fatalf("step %d: over the relevant instances the plan places %v and stops %v; over all, %v and %v", step, relevant.Places, relevant.Stops, all.Places, all.Stops)
	}
	if all.Matching != relevant.Matching || all.BatchSize != relevant.BatchSize || all.Unavailable != relevant.Unavailable || !all.Recheck.Equal(relevant.Recheck) {
		rt.Fatalf("step %d: over the relevant instances matching %d, batch %d, unavailable %d, recheck %v; over all %d, %d, %d, %v", step,
			relevant.Matching, relevant.BatchSize, relevant.Unavailable, relevant.Recheck, all.Matching, all.BatchSize, all.Unavailable, all.Recheck)
	}
	var acted []InstancePlan
	for _, ip := range all.Instances {
		if ip.Matches || ip.Latest != nil {
			acted = append(acted, ip)
		}
	}
	if !slices.Equal(acted, relevant.Instances) {
		rt.Fatalf("step %d: over the relevant instances the plan lists %v; over all, %v", step, relevant.Instances, acted)
	}
}

// claims: live and meant to go on running.
func claims(t *TaskView) bool { return t.Live() && t.Desired == orchestrator.StatusRunning }

func runs(t *TaskView) bool { return t.Last == orchestrator.StatusRunning }

// TestPlanProperties drives plans against a model fleet whose instances
// change and whose tasks start, fail, get lost and stop at random, and
// whose agents start a task only once no other task of the environment
// is live on the instance. It checks after every step: never two live
// tasks of the environment meant to run on one instance, never two
// running, never a placement on an instance that does not match, a
// placement beside a stopping task names one of them, never more healthy
// tasks replaced than the batch allows, never a task name used twice; and
// once the fleet holds still, the environment converges on one healthy
// target task per matching instance.
func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(rt, "instances")
		w := &world{instances: map[string]*InstanceView{}, now: t0}
		roles := []string{"log", "web", ""}
		for i := range n {
			name := fmt.Sprintf("i%02d", i)
			in := ready(name)
			if r := roles[rapid.IntRange(0, 2).Draw(rt, "role")]; r != "" {
				in.Attributes["role"] = r
			}
			w.instances[name] = &in
		}
		filters := []string{}
		if rapid.Bool().Draw(rt, "filtered") {
			filters = append(filters, "role=log")
		}
		target := Target{
			TaskDefinition: "d:1", Group: groupOf(t, filters...), Replace: true,
			Rollout: Rollout{MinHealthyPercent: rapid.IntRange(0, 100).Draw(rt, "mhp"), MinHealthyTime: time.Duration(rapid.IntRange(0, 3).Draw(rt, "mht")) * time.Second, HealthyDeadline: time.Minute, ProgressDeadline: time.Hour},
		}
		seen := map[string]bool{}
		steps := rapid.IntRange(5, 60).Draw(rt, "steps")
		for step := range steps + 40 {
			calm := step >= steps // the last 40 steps: no more chaos
			if !calm && rapid.IntRange(0, 9).Draw(rt, "new version") == 0 {
				target.TaskDefinition = fmt.Sprintf("d:%d", step+2)
			}
			ins, ts := w.views()
			p := ComputePlan(target, ins, ts, w.now)
			planOverRelevantAgrees(rt, step, p, ComputePlan(target, Match(ins, target.Group).Relevant(ts), ts, w.now))

			// Placements: only where the instance matches, and beside a
			// live task only if it stops, naming it.
			byName := map[string]*TaskView{}
			for _, tv := range w.tasks {
				byName[tv.Name] = tv
			}
			stopped := map[string]bool{}
			for _, s := range p.Stops {
				stopped[s.Task] = true
			}
			placed := map[string]bool{}
			for _, pl := range p.Places {
				in := w.instances[pl.Instance]
				if in == nil || in.Status != orchestrator.InstanceReady || !target.Group.Matches(in.Cluster, in.Attributes) {
					rt.Fatalf("step %d: placed on %s, which does not match", step, pl.Instance)
				}
				if placed[pl.Instance] {
					rt.Fatalf("step %d: placed twice on %s", step, pl.Instance)
				}
				placed[pl.Instance] = true
				named := false
				for _, tv := range w.tasks {
					if tv.Instance != pl.Instance || !tv.Live() {
						continue
					}
					if tv.Desired == orchestrator.StatusRunning && !stopped[tv.Name] {
						rt.Fatalf("step %d: placed on %s beside %s, which goes on running", step, pl.Instance, tv.Name)
					}
					named = named || tv.Name == pl.Replaces
				}
				if pl.Replaces != "" && !named {
					if r := byName[pl.Replaces]; r == nil || r.Instance != pl.Instance {
						rt.Fatalf("step %d: placement on %s replaces %q, not a task of the instance", step, pl.Instance, pl.Replaces)
					}
				}
				if !named && countByInstance(w.tasks, (*TaskView).Live)[pl.Instance] > 0 {
					rt.Fatalf("step %d: placed on %s beside a live task without naming one (replaces %q)", step, pl.Instance, pl.Replaces)
				}
				name := TaskName("env", pl.Instance, pl.Seq)
				if seen[name] {
					rt.Fatalf("step %d: task name %s used twice", step, name)
				}
				seen[name] = true
				w.tasks = append(w.tasks, &TaskView{Name: name, Instance: pl.Instance, TaskDefinition: target.TaskDefinition,
					Desired: orchestrator.StatusRunning, Last: orchestrator.StatusPending, CreatedAt: w.now, Seq: pl.Seq})
			}
			// Replacements of healthy tasks stay within the batch.
			for _, tv := range w.tasks {
				byName[tv.Name] = tv
			}
			replacedHealthy := 0
			for _, s := range p.Stops {
				tv := byName[s.Task]
				if s.Reason == ReasonReplaced && tv.Healthy {
					replacedHealthy++
				}
				tv.Desired = orchestrator.StatusStopped
			}
			if budget := max(0, p.BatchSize-p.Unavailable); replacedHealthy > budget {
				rt.Fatalf("step %d: replaced %d healthy tasks, over the budget of %d (batch %d, unavailable %d)", step, replacedHealthy, budget, p.BatchSize, p.Unavailable)
			}
			for inst, c := range countByInstance(w.tasks, claims) {
				if c > 1 {
					rt.Fatalf("step %d: %d live tasks meant to run on %s", step, c, inst)
				}
			}

			// The fleet moves.
			w.now = w.now.Add(time.Second)
			for _, tv := range w.tasks {
				in := w.instances[tv.Instance]
				if in == nil || in.Status == orchestrator.InstanceDown {
					continue
				}
				switch {
				case tv.Last == orchestrator.StatusLost:
					tv.Last, tv.Healthy = orchestrator.StatusStopped, false // the agent is back without it
				case tv.Desired == orchestrator.StatusStopped && tv.Live():
					if calm || rapid.Bool().Draw(rt, "stops now") { // stopping takes a while
						tv.Last, tv.Healthy = orchestrator.StatusStopped, false
					}
				case tv.Last == orchestrator.StatusPending && !calm && rapid.IntRange(0, 3).Draw(rt, "slow start") == 0:
				case tv.Last == orchestrator.StatusPending && countByInstance(w.tasks, (*TaskView).Live)[tv.Instance] > 1:
					// The agent waits for the task it replaces to stop.
				case tv.Last == orchestrator.StatusPending:
					tv.Last, tv.Healthy, tv.HealthySince = orchestrator.StatusRunning, true, w.now
				case tv.Last == orchestrator.StatusRunning && !calm && rapid.IntRange(0, 29).Draw(rt, "dies") == 0:
					tv.Last, tv.Healthy = orchestrator.StatusStopped, false
				}
			}
			for inst, c := range countByInstance(w.tasks, runs) {
				if c > 1 {
					rt.Fatalf("step %d: %d tasks run on %s", step, c, inst)
				}
			}
			if calm {
				for _, in := range w.instances {
					if in.Status == orchestrator.InstanceDown {
						in.Status = orchestrator.InstanceReady // it returns
					}
				}
				continue
			}
			for name, in := range w.instances {
				switch rapid.IntRange(0, 19).Draw(rt, "instance event") {
				case 0:
					in.Status = orchestrator.InstanceDown
					for _, tv := range w.tasks {
						if tv.Instance == name && tv.Live() {
							tv.Last, tv.Healthy = orchestrator.StatusLost, false
						}
					}
				case 1:
					in.Status = orchestrator.InstanceReady
				case 2:
					in.Status = orchestrator.InstanceDraining
				case 3:
					in.Attributes = map[string]string{"role": roles[rapid.IntRange(0, 2).Draw(rt, "new role")]}
				}
			}
		}
		// Converged: one healthy target task per matching instance, none
		// live elsewhere.
		ins, ts := w.views()
		p := ComputePlan(target, ins, ts, w.now.Add(time.Hour))
		if len(p.Places)+len(p.Stops) != 0 {
			rt.Fatalf("not converged after the fleet held still: places %v stops %v", p.Places, p.Stops)
		}
		live := map[string]*TaskView{}
		for _, tv := range w.tasks {
			if tv.Live() {
				live[tv.Instance] = tv
			}
		}
		for name, in := range w.instances {
			matches := in.Status == orchestrator.InstanceReady && target.Group.Matches(in.Cluster, in.Attributes)
			tv := live[name]
			switch {
			case matches && (tv == nil || tv.TaskDefinition != target.TaskDefinition || !tv.Healthy):
				rt.Fatalf("matching instance %s runs %+v, want a healthy %s", name, tv, target.TaskDefinition)
			case !matches && tv != nil:
				rt.Fatalf("instance %s does not match but runs %s", name, tv.Name)
			}
		}
	})
}

func TestEarliest(t *testing.T) {
	a, b := t0, t0.Add(time.Second)
	for _, tc := range []struct{ x, y, want time.Time }{
		{a, b, a}, {b, a, a}, {time.Time{}, b, b}, {b, time.Time{}, b}, {time.Time{}, time.Time{}, time.Time{}},
	} {
		if got := Earliest(tc.x, tc.y); !got.Equal(tc.want) {
			t.Errorf("Earliest(%v, %v) = %v, want %v", tc.x, tc.y, got, tc.want)
		}
	}
}
