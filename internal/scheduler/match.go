package scheduler

import (
	"slices"
	"strings"

	"trellis.dev/trellis/internal/orchestrator"
)

// Matching is what an instance group selects out of the fleet.
type Matching struct {
	// All is every instance, sorted by name; Selected the ready ones in
	// the group, in the same order.
	All      []InstanceView
	Selected []InstanceView
	selected map[string]bool
}

// Match selects, out of all (sorted by name), the instances that are
// ready and in group: those an environment of that group runs on.
func Match(all []InstanceView, group Group) Matching {
	m := Matching{All: all, selected: map[string]bool{}}
	for _, in := range all {
		if selects(group, &in) {
			m.Selected = append(m.Selected, in)
			m.selected[in.Name] = true
		}
	}
	return m
}

func selects(group Group, in *InstanceView) bool {
	return in.Status == orchestrator.InstanceReady && group.Matches(in.Cluster, in.Attributes)
}

// Relevant is the instances a plan over tasks has to walk, sorted by
// name: the selected ones, and those that hold one of the tasks (to stop
// it, or to leave it alone while the instance is down). ComputePlan over
// them decides what it decides over All: an instance that neither matches
// nor holds a task has nothing to do. With a thousand instances selected
// out of five thousand, that is a fifth of the walk.
func (m Matching) Relevant(tasks []TaskView) []InstanceView {
	var extra []InstanceView
	var added map[string]bool
	for _, t := range tasks {
		if m.selected[t.Instance] || added[t.Instance] {
			continue
		}
		if added == nil {
			added = map[string]bool{}
		}
		added[t.Instance] = true
		i, ok := slices.BinarySearchFunc(m.All, t.Instance, func(in InstanceView, name string) int { return strings.Compare(in.Name, name) })
		if ok {
			extra = append(extra, m.All[i])
		}
	}
	if len(extra) == 0 {
		return m.Selected
	}
	out := append(slices.Clip(m.Selected), extra...)
	slices.SortFunc(out, func(a, b InstanceView) int { return strings.Compare(a.Name, b.Name) })
	return out
}
