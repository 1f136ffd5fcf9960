package controllers

import (
	"sync"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

// The scheduler reads the instances and its tasks from the controllers'
// cache (controller.Cache), which the Manager's watches keep, decoded,
// and which holds every event before the mapper that queues a run sees
// it. What it reads there is declared here (cachedTypes) and kept by the
// runtime, never by the controller's own hand: an environment's tasks are
// found by the cache's owner index, each with its view as plans read it
// (taskView, worked out by the cache once per change of the task, not on
// every run); the live tasks of an instance by orchestrator's
// LiveTasksByInstance (the host ports held there). The one thing it keeps
// itself, the instances an environment's version selects, is worked out
// again whenever the cache's revision of the instances moved
// (instanceViews): its mappers only map.
//
// Correctness does not rest on the cache being current: placements are
// create-only writes of names the store decides, and every other write is
// a CAS on the version read, so a stale entry makes a write fail and the
// reconcile run again. It does rest on it being complete, which the
// Manager sees to: the controller's workers start each term only once the
// instances and tasks are listed whole into the cache.

// cachedTypes are what the controller reads from the cache: its tasks by
// owner (the built-in index) with their views, the live tasks by instance
// (the host ports held there, orchestrator.HostPortsCached), the
// instances, the task definitions (what a definition asks of an instance,
// and the host ports a task publishes), and the environments (every one
// is run again when an instance changes, and those blocked on an instance
// when a task there changes: blockedOn).
var cachedTypes = []controller.CachedType{
	{Type: orchestrator.TaskType, Indexes: []*controller.Index{orchestrator.LiveTasksByInstance}, Derived: []*controller.Derived{taskView}},
	{Type: orchestrator.InstanceType, Derived: []*controller.Derived{orchestrator.MergedInstance}},
	{Type: orchestrator.TaskDefinitionType},
	{Type: scheduler.EnvironmentType, Indexes: []*controller.Index{blockedOn}},
}

// taskView is a task of an environment as plans read it, made by the cache
// as it applies the task (nil for a task no environment owns).
var taskView = &controller.Derived{Name: "scheduler-task-view", Make: func(o *controller.Object) any {
	owner := o.Resource.GetOwner()
	if owner == nil || !ids.SameType(owner.GetType(), scheduler.EnvironmentType) {
		return nil
	}
	t, ok := controller.Decoded[*pborch.Task](o)
	if !ok {
		return nil
	}
	return &storedTask{res: o.Resource, t: t, view: scheduler.TaskViewOf(owner.GetName(), o.Resource, t)}
}}

// tasksOf returns the tasks env owns in the cache, this incarnation's only
// (a task of an earlier one is not ours), by name. It costs a pass over
// the environment's tasks: their views are the cache's.
func tasksOf(cache *controller.Cache, env *pbresource.ID) []*storedTask {
	objs := cache.ByIndex(orchestrator.TaskType, controller.IndexOwner, controller.OwnerKey(env))
	out := make([]*storedTask, 0, len(objs))
	for _, o := range objs {
		if o.Resource.GetOwner().GetUid() != env.GetUid() {
			continue
		}
		if st, ok := controller.DerivedOf[*storedTask](o, taskView); ok {
			out = append(out, st)
		}
	}
	return out
}

// instanceViews keeps the instances as plans read them, and per
// environment the instances its version's group selects, worked out again
// only when the cache's instances changed (controller.Cache.Revision) or
// the environment moved to another version: runs outnumber both by far,
// and matching thousands of instances was most of a run's work.
type instanceViews struct {
	cache *controller.Cache

	mu sync.Mutex
	// sorted is the instances at the cache's revision sortedAt, nil when
	// not made yet. It is shared with the runs, which only read it; a
	// change makes a new slice.
	sortedAt uint64
	sorted   []scheduler.InstanceView
	matches  map[string]matchMemo
}

// matchMemo is the instances that match an environment's version.
type matchMemo struct {
	revision uint64
	version  string
	matching scheduler.Matching
}

func newInstanceViews(cache *controller.Cache) *instanceViews {
	return &instanceViews{cache: cache, matches: map[string]matchMemo{}}
}

// forget drops what was derived for an environment (it is gone).
func (v *instanceViews) forget(env string) {
	v.mu.Lock()
	delete(v.matches, env)
	v.mu.Unlock()
}

// all returns the instances, sorted by name. The caller must not modify
// the slice.
func (v *instanceViews) all() []scheduler.InstanceView {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.sortedLocked()
}

func (v *instanceViews) sortedLocked() []scheduler.InstanceView {
	// The revision is read before the list: a change the list misses
	// moves it again.
	at := v.cache.Revision(orchestrator.InstanceType)
	if v.sorted != nil && v.sortedAt == at {
		return v.sorted
	}
	objs := v.cache.List(orchestrator.InstanceType) // sorted by name: instances have no namespace
	sorted := make([]scheduler.InstanceView, 0, len(objs))
	for _, o := range objs {
		if in, ok := orchestrator.CachedInstance(o); ok {
			sorted = append(sorted, scheduler.InstanceView{Name: o.Resource.GetId().GetName(), Cluster: in.GetCluster(), Status: in.GetStatus(), Attributes: in.GetAttributes()})
		}
	}
	v.sorted, v.sortedAt = sorted, at
	return sorted
}

// matching is the instances that match group, the instance group of
// version, the environment's desired version. The caller must not modify
// what it returns.
func (v *instanceViews) matching(env, version string, group scheduler.Group) scheduler.Matching {
	v.mu.Lock()
	defer v.mu.Unlock()
	all := v.sortedLocked()
	if m, ok := v.matches[env]; ok && m.revision == v.sortedAt && m.version == version {
		return m.matching
	}
	m := scheduler.Match(all, group)
	v.matches[env] = matchMemo{revision: v.sortedAt, version: version, matching: m}
	return m
}

// envKey names an environment in the memo.
func envKey(id *pbresource.ID) string {
	return id.GetTenancy().GetNamespace() + "/" + id.GetName()
}
