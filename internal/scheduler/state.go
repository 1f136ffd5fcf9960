package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"time"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// Instance states in an environment's view.
const (
	ViewActive    = "active"
	ViewLaunching = "launching"
	ViewUnhealthy = "unhealthy"
	ViewStopping  = "stopping"
	ViewMissing   = "missing"
	ViewBlocked   = "blocked"
)

// State computes the seed's view of an environment: how many instances
// match, what runs on each, grouped by task definition and version.
// numbers maps version uuids to their numbers.
func State(group Group, instances []InstanceView, tasks []TaskView, numbers map[string]int64) *pbscheduler.EnvironmentState {
	st := &pbscheduler.EnvironmentState{Current: map[string]*pbscheduler.TaskNames{}}
	matching := map[string]bool{}
	for _, in := range instances {
		if in.Status == orchestrator.InstanceReady && group.Matches(in.Cluster, in.Attributes) {
			matching[in.Name] = true
			st.Desired++
		}
	}
	live := map[string]TaskView{}
	for _, t := range tasks {
		if !t.Live() {
			continue
		}
		if cur, ok := live[t.Instance]; !ok || (cur.Stopping() && !t.Stopping()) || (cur.Stopping() == t.Stopping() && t.Seq > cur.Seq) {
			live[t.Instance] = t
		}
	}
	type key struct {
		def, version string
	}
	counts := map[key]*pbscheduler.VersionCount{}
	var names []string
	for name := range matching {
		names = append(names, name)
	}
	for name := range live {
		if !matching[name] {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		is := &pbscheduler.InstanceState{Instance: name, Matches: matching[name], State: ViewMissing}
		t, ok := live[name]
		if ok {
			// The health is the task's by the one rule every view shows
			// (orchestrator.TaskHealth); the state is what it means here.
			is.Task, is.TaskDefinition, is.VersionNumber, is.Health = t.Name, t.TaskDefinition, numbers[t.Version], t.Shown
			switch {
			case t.Stopping():
				is.State = ViewStopping
				st.Stopping++
			case t.Healthy:
				is.State = ViewActive
				st.Active++
			case t.Last == orchestrator.StatusLost, t.Shown == orchestrator.TaskUnhealthy:
				is.State = ViewUnhealthy
				st.Unhealthy++
			default: // placed, starting, or running with checks not passed yet
				is.State = ViewLaunching
				st.Launching++
			}
			k := key{t.TaskDefinition, t.Version}
			c := counts[k]
			if c == nil {
				c = &pbscheduler.VersionCount{TaskDefinition: t.TaskDefinition, Version: t.Version, VersionNumber: numbers[t.Version]}
				counts[k] = c
			}
			c.Tasks++
			if t.Healthy {
				c.Healthy++
			}
			names := st.Current[t.TaskDefinition]
			if names == nil {
				names = &pbscheduler.TaskNames{}
				st.Current[t.TaskDefinition] = names
			}
			names.Tasks = append(names.Tasks, t.Name)
		}
		st.Instances = append(st.Instances, is)
	}
	for _, c := range counts {
		st.Versions = append(st.Versions, c)
	}
	slices.SortFunc(st.Versions, func(a, b *pbscheduler.VersionCount) int {
		if a.VersionNumber != b.VersionNumber {
			return int(b.VersionNumber - a.VersionNumber)
		}
		return strings.Compare(a.TaskDefinition, b.TaskDefinition)
	})
	st.Summary = Summary(st)
	return st
}

// Summary is the seed's status line: "5 desired: 2 active, 3 launching,
// 1 unhealthy" (and ", N stopping" when tasks are stopping).
func Summary(st *pbscheduler.EnvironmentState) string {
	s := fmt.Sprintf("%d desired: %d active, %d launching, %d unhealthy", st.GetDesired(), st.GetActive(), st.GetLaunching(), st.GetUnhealthy())
	if st.GetStopping() > 0 {
		s += fmt.Sprintf(", %d stopping", st.GetStopping())
	}
	if st.GetBlocked() > 0 {
		s += fmt.Sprintf(", %d blocked", st.GetBlocked())
	}
	return s
}

// MarkBlocked marks in an environment's view the instances the scheduler
// last found blocked (EnvironmentStatus.blocked): each gets the reason,
// and one without a live task the state "blocked" instead of "missing";
// the summary counts them. Instances no longer in the group are left out.
func MarkBlocked(st *pbscheduler.EnvironmentState, blocked []*pbscheduler.BlockedInstance) {
	if len(blocked) == 0 {
		return
	}
	why := make(map[string]string, len(blocked))
	for _, b := range blocked {
		why[b.GetInstance()] = b.GetReason()
	}
	for _, is := range st.Instances {
		reason, ok := why[is.GetInstance()]
		if !ok || !is.GetMatches() {
			continue
		}
		is.Reason = reason
		if is.GetState() == ViewMissing {
			is.State = ViewBlocked
		}
		st.Blocked++
	}
	st.Summary = Summary(st)
}

// Diff actions.
const (
	ActionPlace   = "place"
	ActionReplace = "replace"
	ActionStop    = "stop"
	ActionKeep    = "keep"
	ActionBlocked = "blocked"
)

// Diff says what deploying a version with taskdef and group would change
// on each instance: the seed's current-vs-desired view, before anything
// runs. Down instances are left out: nothing is done to them until they
// return. The plan is asked at the zero time, so that no decision depends
// on how long a task has been healthy. needs and holders are what the
// task definition asks of an instance and who holds host ports where
// (Target.Needs, Target.PortHolders): an instance that cannot take it is
// "blocked", with why.
func Diff(taskdef string, group Group, instances []InstanceView, tasks []TaskView, needs Needs, holders func(instance string) []PortHolder) *pbscheduler.EnvironmentDiff {
	d := &pbscheduler.EnvironmentDiff{TaskDefinition: taskdef}
	plan := ComputePlan(Target{TaskDefinition: taskdef, Group: group, Rollout: Rollout{MinHealthyPercent: 0}, Replace: true, Needs: needs, PortHolders: holders}, instances, tasks, time.Time{})
	stops := map[string]string{}
	for _, s := range plan.Stops {
		stops[s.Task] = s.Reason
	}
	live := map[string][]TaskView{}
	for _, t := range tasks {
		if t.Live() && !t.Stopping() {
			live[t.Instance] = append(live[t.Instance], t)
		}
	}
	for _, ip := range plan.Instances {
		c := &pbscheduler.InstanceChange{Instance: ip.Instance}
		cur := live[ip.Instance]
		if len(cur) > 0 {
			c.FromTaskDefinition = cur[0].TaskDefinition
		}
		switch {
		case !ip.Matches && len(cur) > 0 && stops[cur[0].Name] != "":
			c.Action, c.Reason = ActionStop, stops[cur[0].Name]
			d.Stop++
		case !ip.Matches:
			continue
		case ip.State == StateBlocked:
			c.Action, c.ToTaskDefinition, c.Reason = ActionBlocked, taskdef, ip.Blocked
			d.Blocked++
		case ip.Current == nil:
			c.Action, c.ToTaskDefinition = ActionPlace, taskdef
			d.Place++
		case ip.Current.TaskDefinition != taskdef:
			c.Action, c.ToTaskDefinition = ActionReplace, taskdef
			d.Replace++
		default:
			c.Action, c.ToTaskDefinition = ActionKeep, taskdef
			d.Keep++
		}
		d.Changes = append(d.Changes, c)
	}
	return d
}
