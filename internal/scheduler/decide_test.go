package scheduler

import (
	"fmt"
	"testing"
	"time"

	"trellis.dev/trellis/internal/orchestrator"
)

// TestDecideInstance walks the per-instance decision through each of its
// cases: what it stops, what it places, and how the instance counts
// toward the rollout's batch.
func TestDecideInstance(t *testing.T) {
	target := func(replace bool) Target {
		return Target{TaskDefinition: "d:2", Group: groupOf(t), Rollout: Rollout{MinHealthyPercent: 75, MinHealthyTime: 10 * time.Second, HealthyDeadline: time.Minute, ProgressDeadline: time.Hour}, Replace: replace}
	}
	withStatus := func(st string) *InstanceView {
		in := ready("i1")
		in.Status = st
		return &in
	}
	up := withStatus(orchestrator.InstanceReady)
	stopped := func(name, def string, seq int64, desired string) TaskView {
		t := running(name, "i1", def, seq)
		t.Last, t.Desired, t.Healthy = orchestrator.StatusStopped, desired, false
		return t
	}
	stopping := func(name, def string, seq int64) TaskView {
		t := running(name, "i1", def, seq)
		t.Desired = orchestrator.StatusStopped
		return t
	}
	unhealthy := func(name, def string, seq int64) TaskView {
		t := running(name, "i1", def, seq)
		t.Healthy, t.HealthySince, t.Health = false, time.Time{}, orchestrator.HealthUnhealthy
		return t
	}
	fresh := running("t1", "i1", "d:2", 1)
	fresh.HealthySince = t0.Add(-4 * time.Second)

	type want struct {
		state       string
		current     string // "" when none
		stops       []Stop
		place       *Placement
		unavailable bool
		replaceable bool
		recheck     time.Time
	}
	for _, tc := range []struct {
		name    string
		target  Target
		in      *InstanceView
		matches bool
		tasks   []TaskView
		want    want
	}{
		{
			name: "a matching instance with no task gets one", target: target(false), in: up, matches: true,
			want: want{state: StateStarting, place: &Placement{Instance: "i1", Seq: 1}, unavailable: true},
		},
		{
			name: "a task that died is placed again as a repair, with the next seq", target: target(false), in: up, matches: true,
			tasks: []TaskView{stopped("t1", "d:2", 1, orchestrator.StatusRunning)},
			want:  want{state: StateStarting, place: &Placement{Instance: "i1", Seq: 2, Repair: true}, unavailable: true},
		},
		{
			name: "a task that was stopped on purpose is not a repair", target: target(false), in: up, matches: true,
			tasks: []TaskView{stopped("t1", "d:2", 1, orchestrator.StatusStopped)},
			want:  want{state: StateStarting, place: &Placement{Instance: "i1", Seq: 2}, unavailable: true},
		},
		{
			name: "a task still stopping is replaced by the placement, which names it", target: target(false), in: up, matches: true,
			tasks: []TaskView{stopping("t3", "d:1", 3)},
			want:  want{state: StateStarting, place: &Placement{Instance: "i1", Seq: 4, Replaces: "t3"}, unavailable: true},
		},
		{
			name: "the target's task, healthy for min_healthy_time, is complete", target: target(true), in: up, matches: true,
			tasks: []TaskView{running("t1", "i1", "d:2", 1)},
			want:  want{state: StateComplete, current: "t1"},
		},
		{
			name: "the target's task, healthy for less, is starting until it has been", target: target(true), in: up, matches: true,
			tasks: []TaskView{fresh},
			want:  want{state: StateStarting, current: "t1", unavailable: true, recheck: t0.Add(6 * time.Second)},
		},
		{
			name: "the target's task, not healthy, is starting with no recheck", target: target(true), in: up, matches: true,
			tasks: []TaskView{unhealthy("t1", "d:2", 1)},
			want:  want{state: StateStarting, current: "t1", unavailable: true},
		},
		{
			name: "without a deployment, an old healthy task is outdated and left", target: target(false), in: up, matches: true,
			tasks: []TaskView{running("t1", "i1", "d:1", 1)},
			want:  want{state: StateOutdated, current: "t1"},
		},
		{
			name: "without a deployment, an old unhealthy task is outdated, left, and unavailable", target: target(false), in: up, matches: true,
			tasks: []TaskView{unhealthy("t1", "d:1", 1)},
			want:  want{state: StateOutdated, current: "t1", unavailable: true},
		},
		{
			name: "in a deployment, an old healthy task waits for room in the batch", target: target(true), in: up, matches: true,
			tasks: []TaskView{running("t1", "i1", "d:1", 1)},
			want:  want{state: StatePending, current: "t1", replaceable: true},
		},
		{
			name: "in a deployment, an old unhealthy task is replaced at once", target: target(true), in: up, matches: true,
			tasks: []TaskView{unhealthy("t1", "d:1", 1)},
			want: want{state: StateStarting, current: "t1", unavailable: true,
				stops: []Stop{{Task: "t1", Reason: ReasonReplaced}}, place: &Placement{Instance: "i1", Seq: 2, Replaces: "t1"}},
		},
		{
			name: "of two live tasks the target's is kept and the other stopped", target: target(false), in: up, matches: true,
			tasks: []TaskView{running("t1", "i1", "d:1", 1), running("t2", "i1", "d:2", 2)},
			want:  want{state: StateComplete, current: "t2", stops: []Stop{{Task: "t1", Reason: ReasonDuplicate}}},
		},
		{
			name: "of two live tasks of the target the healthy one is kept", target: target(false), in: up, matches: true,
			tasks: []TaskView{running("t1", "i1", "d:2", 1), unhealthy("t2", "d:2", 2)},
			want:  want{state: StateComplete, current: "t1", stops: []Stop{{Task: "t2", Reason: ReasonDuplicate}}},
		},
		{
			name: "a task on an instance that is gone is stopped", target: target(true), in: nil, matches: false,
			tasks: []TaskView{stopped("t1", "d:2", 1, orchestrator.StatusRunning), running("t2", "i1", "d:2", 2)},
			want:  want{state: StateStopping, stops: []Stop{{Task: "t2", Reason: ReasonInstanceGone}}},
		},
		{
			name: "a task on an instance that left is stopped", target: target(true), in: withStatus(orchestrator.InstanceLeft), matches: false,
			tasks: []TaskView{running("t1", "i1", "d:2", 1)},
			want:  want{state: StateStopping, stops: []Stop{{Task: "t1", Reason: ReasonInstanceLeft}}},
		},
		{
			name: "a task on a draining instance is stopped", target: target(true), in: withStatus(orchestrator.InstanceDraining), matches: false,
			tasks: []TaskView{running("t1", "i1", "d:2", 1)},
			want:  want{state: StateStopping, stops: []Stop{{Task: "t1", Reason: ReasonDraining}}},
		},
		{
			name: "a task on a ready instance out of the group is stopped", target: target(true), in: up, matches: false,
			tasks: []TaskView{running("t1", "i1", "d:2", 1)},
			want:  want{state: StateStopping, stops: []Stop{{Task: "t1", Reason: ReasonNoLongerMatches}}},
		},
		{
			name: "a task already stopping is not asked again, and the instance is stopping", target: target(true), in: nil, matches: false,
			tasks: []TaskView{stopping("t1", "d:2", 1)},
			want:  want{state: StateStopping},
		},
		{
			name: "a task on a down instance is left alone: its agent may come back with it", target: target(true), in: withStatus(orchestrator.InstanceDown), matches: false,
			tasks: []TaskView{running("t1", "i1", "d:1", 1)},
			want:  want{current: "t1"},
		},
		{
			name: "an instance out of the group with nothing live is left as it is", target: target(true), in: up, matches: false,
			tasks: []TaskView{stopped("t1", "d:2", 1, orchestrator.StatusStopped)},
			want:  want{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tasks := make([]*TaskView, len(tc.tasks))
			for i := range tc.tasks {
				tasks[i] = &tc.tasks[i]
			}
			d := DecideInstance(tc.target, "i1", tc.in, tc.matches, tasks, t0)
			if d.Instance.Instance != "i1" || d.Instance.Matches != tc.matches {
				t.Errorf("instance %q matches %v, want i1 matches %v", d.Instance.Instance, d.Instance.Matches, tc.matches)
			}
			if d.Instance.State != tc.want.state {
				t.Errorf("state = %q, want %q", d.Instance.State, tc.want.state)
			}
			current := ""
			if d.Instance.Current != nil {
				current = d.Instance.Current.Name
			}
			if current != tc.want.current {
				t.Errorf("current = %q, want %q", current, tc.want.current)
			}
			if len(tasks) > 0 && d.Instance.Latest != tasks[len(tasks)-1] {
				t.Errorf("latest = %v, want the last task given, %s", d.Instance.Latest, tasks[len(tasks)-1].Name)
			}
			if fmt.Sprint(d.Stops) != fmt.Sprint(tc.want.stops) {
				t.Errorf("stops = %v, want %v", d.Stops, tc.want.stops)
			}
			if fmt.Sprint(d.Place) != fmt.Sprint(tc.want.place) {
				t.Errorf("place = %v, want %v", d.Place, tc.want.place)
			}
			if d.Unavailable != tc.want.unavailable || d.Replaceable != tc.want.replaceable {
				t.Errorf("unavailable %v, replaceable %v; want %v, %v", d.Unavailable, d.Replaceable, tc.want.unavailable, tc.want.replaceable)
			}
			if !d.Recheck.Equal(tc.want.recheck) {
				t.Errorf("recheck = %v, want %v", d.Recheck, tc.want.recheck)
			}
		})
	}
}
