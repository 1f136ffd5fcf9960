package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"time"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// MaxListedInstances bounds the per-instance progress a deployment keeps
// (the counts cover every instance).
const MaxListedInstances = 500

// DeploymentView is what progress needs of a deployment.
type DeploymentView struct {
	ID           string
	Type         string
	TaskDef      string
	StartTime    time.Time
	LastProgress time.Time
}

// Progress is how far a deployment is and what becomes of it.
type Progress struct {
	Total, Complete, Failed int
	// Blocked counts the instances of the group where the version cannot
	// be placed now (not in Total); blocked names them with why.
	Blocked int
	blocked []string
	// Instances lists the instances not yet complete, sorted, at most
	// MaxListedInstances of them.
	Instances []*pbscheduler.InstanceProgress
	// Status is the deployment's new final status, or "" while it goes
	// on; Reason says why.
	Status string
	Reason string
	// Recheck is the earliest time the outcome may change with time
	// alone (a deadline); zero when none.
	Recheck time.Time
}

// UserProgress is the progress of an in-progress user deployment over the
// plan made for it: complete when every matching instance runs a task of
// its task definition, healthy for min_healthy_time; unhealthy when a
// task it placed dies or is not healthy within healthy_deadline;
// timed-out when nothing became healthy for progress_deadline.
func UserProgress(d DeploymentView, plan Plan, r Rollout, now time.Time) Progress {
	var pr Progress
	var failures []string
	for _, ip := range plan.Instances {
		if !ip.Matches {
			continue
		}
		state, task, reason := ip.State, "", ""
		if ip.Current != nil {
			task = ip.Current.Name
		}
		if t := ip.Latest; t != nil && t.Deployment == d.ID {
			if fail, why := failedTask(*t, r, now); fail {
				state, task, reason = StateFailed, t.Name, why
				failures = append(failures, fmt.Sprintf("task %s on instance %s %s", t.Name, ip.Instance, why))
			} else if t.Live() && !t.HealthyFor(r.MinHealthyTime, now) {
				pr.Recheck = Earliest(pr.Recheck, t.CreatedAt.Add(r.HealthyDeadline))
			}
		}
		if state == StateBlocked {
			// Not the deployment's to bring to its version while it is:
			// listed, with why, and counted apart.
			pr.Blocked++
			if len(pr.blocked) < maxNamed {
				pr.blocked = append(pr.blocked, ip.Instance+": "+ip.Blocked)
			}
			if len(pr.Instances) < MaxListedInstances {
				pr.Instances = append(pr.Instances, &pbscheduler.InstanceProgress{Instance: ip.Instance, State: state, Task: task, Reason: ip.Blocked})
			}
			continue
		}
		pr.Total++
		switch state {
		case StateComplete:
			pr.Complete++
			continue
		case StateFailed:
			pr.Failed++
		}
		if len(pr.Instances) < MaxListedInstances { // the plan's instances are sorted
			pr.Instances = append(pr.Instances, &pbscheduler.InstanceProgress{Instance: ip.Instance, State: state, Task: task, Reason: reason})
		}
	}
	pr.decide(d, failures, r, now)
	return pr
}

// MonitorProgress is the progress of a new-instance or health-repair
// deployment: the tasks it placed (those the scheduler has not since
// stopped), each complete when healthy for min_healthy_time.
func MonitorProgress(d DeploymentView, tasks []TaskView, r Rollout, now time.Time) Progress {
	var pr Progress
	var failures []string
	for _, t := range LatestTasks(tasks) {
		if t.Deployment != d.ID || (t.Desired != "RUNNING" && !t.Died()) {
			continue
		}
		pr.Total++
		if t.HealthyFor(r.MinHealthyTime, now) {
			pr.Complete++
			continue
		}
		state, reason := StateStarting, ""
		if fail, why := failedTask(t, r, now); fail {
			state, reason = StateFailed, why
			pr.Failed++
			failures = append(failures, fmt.Sprintf("task %s on instance %s %s", t.Name, t.Instance, why))
		} else if t.Live() {
			pr.Recheck = Earliest(pr.Recheck, t.CreatedAt.Add(r.HealthyDeadline))
		}
		pr.Instances = append(pr.Instances, &pbscheduler.InstanceProgress{Instance: t.Instance, State: state, Task: t.Name, Reason: reason})
	}
	slices.SortFunc(pr.Instances, func(a, b *pbscheduler.InstanceProgress) int { return strings.Compare(a.Instance, b.Instance) })
	pr.decide(d, failures, r, now)
	return pr
}

func (pr *Progress) decide(d DeploymentView, failures []string, r Rollout, now time.Time) {
	if len(pr.Instances) > MaxListedInstances {
		pr.Instances = pr.Instances[:MaxListedInstances]
	}
	switch {
	case len(failures) > 0:
		pr.Status = StatusUnhealthy
		pr.Reason = failures[0]
		if len(failures) > 1 {
			pr.Reason += fmt.Sprintf(" (and %d more)", len(failures)-1)
		}
	case pr.Complete == pr.Total && pr.Total == 0 && pr.Blocked > 0:
		pr.Status = StatusCompleted
		pr.Reason = fmt.Sprintf("nothing placed: %s; the version is placed on each one once it can take it", pr.blockedText())
	case pr.Complete == pr.Total:
		pr.Status = StatusCompleted
		pr.Reason = fmt.Sprintf("%d/%d complete", pr.Complete, pr.Total)
		if pr.Blocked > 0 {
			pr.Reason += "; " + pr.blockedText()
		}
	default:
		since := d.LastProgress
		if since.IsZero() {
			since = d.StartTime
		}
		deadline := since.Add(r.ProgressDeadline)
		if !now.Before(deadline) {
			pr.Status = StatusTimedOut
			pr.Reason = fmt.Sprintf("no task became healthy for %s (progress_deadline); %d/%d complete", r.ProgressDeadline, pr.Complete, pr.Total)
			return
		}
		pr.Recheck = Earliest(pr.Recheck, deadline)
	}
}

// maxNamed bounds the instances a message names one by one.
const maxNamed = 5

// blockedText says which instances are blocked and why: "2 instances
// blocked (i1: host port 8080/tcp is taken by task web-1; i2: ...)".
func (pr *Progress) blockedText() string {
	s := fmt.Sprintf("%d instance blocked", pr.Blocked)
	if pr.Blocked > 1 {
		s = fmt.Sprintf("%d instances blocked", pr.Blocked)
	}
	s += " (" + strings.Join(pr.blocked, "; ")
	if pr.Blocked > len(pr.blocked) {
		s += fmt.Sprintf("; and %d more", pr.Blocked-len(pr.blocked))
	}
	return s + ")"
}

// NothingPlaced is the status reason of a user deployment that completed
// without placing anything: no instance of its group is ready. It says
// which instances of the group are there but not ready (down, draining),
// or that none is in the group, and that the version goes to each
// instance that becomes ready and matches (the monitors place it).
func NothingPlaced(group Group, instances []InstanceView) string {
	byStatus := map[string][]string{}
	var statuses []string
	for _, in := range instances {
		if !group.Matches(in.Cluster, in.Attributes) || in.Status == orchestrator.InstanceReady {
			continue
		}
		if byStatus[in.Status] == nil {
			statuses = append(statuses, in.Status)
		}
		byStatus[in.Status] = append(byStatus[in.Status], in.Name)
	}
	if len(statuses) == 0 {
		return fmt.Sprintf("nothing placed: no instance is in the instance group (%s); the version is placed on each instance that joins it", group)
	}
	slices.Sort(statuses)
	parts := make([]string, len(statuses))
	for i, st := range statuses {
		names := byStatus[st]
		slices.Sort(names)
		listed := strings.Join(names[:min(len(names), maxNamed)], ", ")
		if len(names) > maxNamed {
			listed += fmt.Sprintf(" and %d more", len(names)-maxNamed)
		}
		parts[i] = fmt.Sprintf("%d %s: %s", len(names), st, listed)
	}
	return fmt.Sprintf("nothing placed: no instance of the instance group (%s) is ready (%s); the version is placed on each one that becomes ready",
		group, strings.Join(parts, "; "))
}

// failedTask reports whether a task placed by a deployment has failed it,
// and how. A task lost with its instance before it ever ran has not: the
// instance missed its heartbeats (a network blip, a busy server), not the
// task definition; the plan places it again, as a health repair.
func failedTask(t TaskView, r Rollout, now time.Time) (bool, string) {
	if t.Died() && !t.Started && orchestrator.IsLostReason(t.StopReason) {
		return false, ""
	}
	if t.Died() {
		why := "stopped"
		if t.StopReason != "" {
			why += ": " + t.StopReason
		}
		return true, why
	}
	if t.Live() && !t.HealthyFor(r.MinHealthyTime, now) && !now.Before(t.CreatedAt.Add(r.HealthyDeadline)) {
		return true, fmt.Sprintf("was not healthy within %s (healthy_deadline)", r.HealthyDeadline)
	}
	return false, ""
}

// LatestTasks returns each instance's task with the highest seq.
func LatestTasks(tasks []TaskView) map[string]TaskView {
	out := map[string]TaskView{}
	for _, t := range tasks {
		if cur, ok := out[t.Instance]; !ok || t.Seq > cur.Seq {
			out[t.Instance] = t
		}
	}
	return out
}
