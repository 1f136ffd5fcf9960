package scheduler

import (
	"time"

	"trellis.dev/trellis/internal/orchestrator"
)

// InstanceDecision is what ComputePlan decides for one instance before
// the rollout's batch is shared out among the instances.
type InstanceDecision struct {
	// Instance is the plan's view of the instance. Its State is
	// StatePending when the decision is Replaceable: whether it is
	// replaced now depends on the other instances.
	Instance InstancePlan
	// Stops are the tasks to ask to stop there, in order.
	Stops []Stop
	// Place is the task to create there; nil when none.
	Place *Placement
	// Unavailable: no task there is healthy for min_healthy_time, of the
	// target's task definition or (without Replace) of any; it counts
	// against the batch.
	Unavailable bool
	// Replaceable: a healthy task of another task definition runs there,
	// to be replaced if the batch has room.
	Replaceable bool
	// Recheck is when the decision may change with time alone (the task
	// reaching min_healthy_time); zero when never.
	Recheck time.Time
}

// DecideInstance decides for instance name what ComputePlan does there.
// in is the stored instance (nil when gone); matches says whether it is
// ready and in the target's instance group (the caller decides it once,
// as it counts the matching instances for the batch size); tasks are the
// environment's tasks on the instance, oldest first (by seq), and the
// decision's task pointers point into them. It is pure.
func DecideInstance(target Target, name string, in *InstanceView, matches bool, tasks []*TaskView, now time.Time) InstanceDecision {
	var lastSeq int64
	var latest, best, stopping *TaskView
	currents := 0
	for _, t := range tasks {
		lastSeq, latest = t.Seq, t
		switch {
		case t.Stopping():
			stopping = t // the newest
		case t.Live():
			currents++
			if best == nil || betterCurrent(t, best, target.TaskDefinition) {
				best = t
			}
		}
	}
	d := InstanceDecision{Instance: InstancePlan{Instance: name, Latest: latest, Matches: matches}}
	if !matches {
		if in != nil && in.Status == orchestrator.InstanceDown {
			// Its agent may come back with the task running.
			d.Instance.Current = best
			return d
		}
		reason := ReasonNoLongerMatches
		switch {
		case in == nil:
			reason = ReasonInstanceGone
		case in.Status == orchestrator.InstanceLeft:
			reason = ReasonInstanceLeft
		case in.Status == orchestrator.InstanceDraining:
			reason = ReasonDraining
		}
		for _, t := range tasks {
			if t.Live() && !t.Stopping() {
				d.Stops = append(d.Stops, Stop{Task: t.Name, Reason: reason})
			}
		}
		if currents > 0 || stopping != nil {
			d.Instance.State = StateStopping
		}
		return d
	}

	// Keep the best live task; stop any other.
	if currents > 1 {
		for _, t := range tasks {
			if t != best && t.Live() && !t.Stopping() {
				d.Stops = append(d.Stops, Stop{Task: t.Name, Reason: ReasonDuplicate})
			}
		}
	}
	if best == nil {
		pl := Placement{Instance: name, Seq: lastSeq + 1, Repair: latest != nil && latest.Died()}
		if stopping != nil {
			pl.Replaces = stopping.Name
		}
		if d.block(target, in, pl.Replaces) {
			return d
		}
		d.Unavailable = true
		d.Place = &pl
		d.Instance.State = StateStarting
		return d
	}
	cur := best
	d.Instance.Current = cur
	switch {
	case cur.TaskDefinition == target.TaskDefinition:
		if cur.HealthyFor(target.Rollout.MinHealthyTime, now) {
			d.Instance.State = StateComplete
		} else {
			d.Instance.State = StateStarting
			d.Unavailable = true
			if cur.Healthy && !cur.HealthySince.IsZero() {
				d.Recheck = cur.HealthySince.Add(target.Rollout.MinHealthyTime)
			}
		}
	case !target.Replace:
		d.Instance.State = StateOutdated
		d.Unavailable = !cur.Healthy
	case !cur.Healthy:
		// Unavailable already: replacing it costs nothing.
		d.Unavailable = true
		if !d.block(target, in, cur.Name) {
			d.replace()
		}
	case d.block(target, in, cur.Name):
		// The healthy task of another definition goes on running.
	default:
		d.Instance.State = StatePending
		d.Replaceable = true
	}
	return d
}

// block marks the instance blocked when the target cannot be placed on it
// (replacing task replaces), and reports whether it is.
func (d *InstanceDecision) block(target Target, in *InstanceView, replaces string) bool {
	why := target.blocked(in, replaces)
	if why == "" {
		return false
	}
	d.Instance.State, d.Instance.Blocked = StateBlocked, why
	return true
}

// replace stops the instance's current task and places its successor,
// with the next seq.
func (d *InstanceDecision) replace() {
	ip := &d.Instance
	d.Stops = append(d.Stops, Stop{Task: ip.Current.Name, Reason: ReasonReplaced})
	d.Place = &Placement{Instance: ip.Instance, Seq: ip.Latest.Seq + 1, Replaces: ip.Current.Name}
	ip.State = StateStarting
}

// betterCurrent reports whether live task a is a better one to keep than
// b: of the target's task definition, then healthy, then the newer.
func betterCurrent(a, b *TaskView, taskdef string) bool {
	if (a.TaskDefinition == taskdef) != (b.TaskDefinition == taskdef) {
		return a.TaskDefinition == taskdef
	}
	if a.Healthy != b.Healthy {
		return a.Healthy
	}
	return a.Seq > b.Seq
}
