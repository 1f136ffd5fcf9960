package scheduler

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"trellis.dev/trellis/internal/orchestrator"
)

// InstanceView is what a plan knows of an instance.
type InstanceView struct {
	Name       string
	Cluster    string
	Status     string
	Attributes map[string]string
}

// TaskView is what a plan knows of one task of the environment.
type TaskView struct {
	Name           string
	Instance       string
	TaskDefinition string
	Version        string
	Deployment     string
	Desired        string
	Last           string
	// Health is the task's reported health (HEALTHY, UNHEALTHY, UNKNOWN).
	Health string
	// Shown is its health as views show it (orchestrator.TaskHealth).
	Shown string
	// Healthy: running and passing its health checks (if it has any).
	Healthy bool
	// HealthySince is when it became healthy, as its agent reported
	// (zero when it is not).
	HealthySince time.Time
	CreatedAt    time.Time
	// Started: its agent reported it running once (started_at is set).
	Started    bool
	StopReason string
	// Seq numbers the environment's tasks on one instance (see TaskName).
	Seq int64
}

// Live reports whether the task holds its instance: it is not STOPPED.
// A LOST task is live: its agent may come back with it still running.
func (t TaskView) Live() bool { return t.Last != orchestrator.StatusStopped }

// Stopping: live, and asked to stop.
func (t TaskView) Stopping() bool { return t.Live() && t.Desired == orchestrator.StatusStopped }

// Died: it stopped although it was meant to run.
func (t TaskView) Died() bool {
	return t.Last == orchestrator.StatusStopped && t.Desired == orchestrator.StatusRunning
}

// HealthyFor reports whether the task has been healthy for at least d at
// now.
func (t TaskView) HealthyFor(d time.Duration, now time.Time) bool {
	return t.Healthy && !t.HealthySince.IsZero() && !now.Before(t.HealthySince.Add(d))
}

// Target is what the environment should run.
type Target struct {
	TaskDefinition string
	Version        string
	Group          Group
	Rollout        Rollout
	// Replace: a user deployment is in progress, so tasks of another task
	// definition are replaced, a batch at a time. Without it the scheduler
	// only places where nothing runs and stops what no longer matches.
	Replace bool
	// Needs is what the task definition asks of an instance beyond the
	// group: an instance in the group that cannot meet it gets no task
	// now (its plan is StateBlocked, and says why).
	Needs Needs
	// PortHolders returns the live tasks on an instance that publish fixed
	// host ports, of every environment and namespace, and those run by
	// hand. It is asked only when Needs.HostPorts is not empty, and only
	// for instances where a task is about to be placed; nil means none.
	PortHolders func(instance string) []PortHolder
}

// Instance progress states, as a deployment reports them.
const (
	StatePending  = "pending"
	StateStopping = "stopping"
	StateStarting = "starting"
	StateComplete = "complete"
	StateFailed   = "failed"
	StateOutdated = "outdated"
	// StateBlocked: the instance is in the group, but the target cannot
	// be placed there now (InstancePlan.Blocked says why).
	StateBlocked = "blocked"
)

// Placement is a new task to create.
type Placement struct {
	Instance string
	Seq      int64
	// Repair: the instance's previous task died (a health repair); else a
	// new instance or a replacement.
	Repair bool
	// Replaces names the live task of the instance that the new one
	// replaces: it is stopping, or asked to stop by the same plan. The
	// agent starts the new task only once that one has stopped.
	Replaces string
}

// Stop is a live task to ask to stop.
type Stop struct {
	Task   string
	Reason string
}

// InstancePlan is the plan's view of one instance.
type InstancePlan struct {
	Instance string
	// Matches: ready and in the instance group.
	Matches bool
	// Current is the live task kept there (nil when none); Latest the
	// task with the highest seq. Both point into the tasks planned over.
	Current *TaskView
	Latest  *TaskView
	// State is its progress toward the target.
	State string
	// Blocked says why the target cannot be placed there now (State is
	// StateBlocked); what runs there, if anything, is left as it is.
	Blocked string
}

// Plan is what to do so that the environment converges on its target.
type Plan struct {
	Places    []Placement
	Stops     []Stop
	Instances []InstancePlan
	// Matching counts the instances that match; BatchSize is how many of
	// them may be replaced at once; Unavailable how many have no task
	// that is healthy (for min_healthy_time, for the target's).
	Matching    int
	BatchSize   int
	Unavailable int
	// Recheck is the earliest time a decision may change with time alone
	// (a task reaching min_healthy_time); zero when none.
	Recheck time.Time
}

// Reasons the scheduler gives when it stops a task.
const (
	ReasonNoLongerMatches = "the instance no longer matches the environment's instance group"
	ReasonInstanceGone    = "the instance is gone"
	ReasonInstanceLeft    = "the instance left the cluster"
	ReasonDraining        = "the instance is draining"
	ReasonDuplicate       = "a second live copy of the environment's task on the instance: only one may run"
	ReasonReplaced        = "replaced by a new version of the environment"
)

// ComputePlan decides, for every instance, whether to place, replace,
// stop or leave the environment's task, so that exactly one live task of
// the target runs on every matching instance and none elsewhere. It is
// pure; the caller applies the result with CAS writes that fail if the
// store moved, and asks again. instances may be the whole fleet or only
// the part Matching.Relevant keeps: the decisions are the same.
//
// The rules it keeps:
//   - never a placement on an instance that does not match, nor beside
//     a live task (LOST counts as live) that is meant to go on running:
//     after the plan, at most one live task per instance has desired
//     status RUNNING;
//   - a replacement stops the old task and places the new one in the
//     same plan, the new naming the old (Placement.Replaces): the agent
//     starts the new task once the old has stopped, and nothing waits for
//     a round trip through the scheduler in between. A task already
//     stopping (asked by a user, or by an earlier plan) is replaced the
//     same way;
//   - replacements of healthy tasks stop at BatchSize instances
//     unavailable; a task that is not healthy anyway is replaced at once;
//   - an instance that is down is left alone (its agent may return with
//     the task); one that drains, leaves, stops matching or is gone has
//     its task stopped;
//   - no placement, nor replacement, on an instance that cannot take the
//     target (Target.Needs: a bridge task where network.bridge is not
//     "true", a fixed host port another live task publishes there): it is
//     blocked, keeps what it runs (unavailable only if that is not
//     healthy), and a deployment does not count it among the instances to
//     bring to its version, but lists it, with why.
func ComputePlan(target Target, instances []InstanceView, tasks []TaskView, now time.Time) Plan {
	// Walk instances and tasks together, both sorted by instance name: one
	// sort each, no map, no per-instance allocation.
	ins := make([]int32, len(instances))
	for i := range ins {
		ins[i] = int32(i)
	}
	byName := func(a, b int32) int { return strings.Compare(instances[a].Name, instances[b].Name) }
	if !slices.IsSortedFunc(ins, byName) { // the scheduler's controller keeps them sorted
		slices.SortFunc(ins, byName)
	}
	order := make([]int32, len(tasks))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		return cmp.Or(strings.Compare(tasks[a].Instance, tasks[b].Instance), cmp.Compare(tasks[a].Seq, tasks[b].Seq))
	})

	p := Plan{Instances: make([]InstancePlan, 0, len(instances))}
	// Whether each instance matches, decided once (by index).
	match := make([]bool, len(instances))
	for i := range instances {
		in := &instances[i]
		match[i] = selects(target.Group, in)
		if match[i] {
			p.Matching++
		}
	}
	p.BatchSize = target.Rollout.BatchSize(p.Matching)

	var replaceable []int // indexes into p.Instances of healthy old tasks
	var mine []*TaskView  // the instance's tasks; one buffer for the walk
	ii, ti := 0, 0
	for ii < len(ins) || ti < len(order) {
		// The next instance name, from either list.
		var name string
		switch {
		case ii == len(ins):
			name = tasks[order[ti]].Instance
		case ti == len(order):
			name = instances[ins[ii]].Name
		default:
			name = min(instances[ins[ii]].Name, tasks[order[ti]].Instance)
		}
		var in *InstanceView
		matches := false
		for ii < len(ins) && instances[ins[ii]].Name == name {
			in, matches = &instances[ins[ii]], match[ins[ii]] // a duplicate name: the last wins
			ii++
		}
		mine = mine[:0]
		for ti < len(order) && tasks[order[ti]].Instance == name {
			mine = append(mine, &tasks[order[ti]])
			ti++
		}
		d := DecideInstance(target, name, in, matches, mine, now)
		p.Stops = append(p.Stops, d.Stops...)
		if d.Place != nil {
			p.Places = append(p.Places, *d.Place)
		}
		if d.Unavailable {
			p.Unavailable++
		}
		if !d.Recheck.IsZero() {
			p.Recheck = Earliest(p.Recheck, d.Recheck)
		}
		if d.Replaceable {
			replaceable = append(replaceable, len(p.Instances))
		}
		p.Instances = append(p.Instances, d.Instance)
	}
	budget := p.BatchSize - p.Unavailable
	for _, i := range replaceable {
		if budget <= 0 {
			break
		}
		budget--
		ip := &p.Instances[i]
		p.replace(ip)
	}
	return p
}

// replace stops the instance's current task and places its successor,
// with the next seq, in the same plan.
func (p *Plan) replace(ip *InstancePlan) {
	p.Stops = append(p.Stops, Stop{Task: ip.Current.Name, Reason: ReasonReplaced})
	p.Places = append(p.Places, Placement{Instance: ip.Instance, Seq: ip.Latest.Seq + 1, Replaces: ip.Current.Name})
	ip.State = StateStarting
}

// Earliest is the earlier of a and b, where a zero time means "none":
// the other wins. Every recheck starts zero and is narrowed by the
// deadlines met on the way; a step with none must not clear the others.
func Earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
