package controllers

import (
	"sync"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

// The scheduler reads the instances and its tasks from the controllers'
// cache (controller.Cache), which the Manager's watches keep, decoded,
// and which holds every event before the mapper that queues a run sees
// it. What it keeps itself is derived from that cache and cheap to lose:
// the instances as plans read them, sorted by name, and which of them
// each environment's version selects.
//
// Correctness does not rest on the cache being current: placements are
// create-only writes of names the store decides, and every other write is
// a CAS on the version read, so a stale entry makes a write fail and the
// reconcile run again. It does rest on it being complete, which the
// Manager sees to: the controller's workers start each term only once the
// instances and tasks are listed whole into the cache.

// cachedTypes are what the controller reads from the cache: its tasks by
// owner (the built-in index), the live tasks by instance (the host ports
// held there, orchestrator.HostPortsCached), the instances, and the task
// definitions (what a definition asks of an instance, and the host ports
// a task publishes).
var cachedTypes = []controller.CachedType{
	{Type: orchestrator.TaskType, Indexes: []*controller.Index{orchestrator.LiveTasksByInstance}},
	{Type: orchestrator.InstanceType},
	{Type: orchestrator.TaskDefinitionType},
}

// instanceViews keeps the instances as plans read them, and per
// environment the instances its version's group selects, worked out again
// only when an instance changed or the environment moved to another
// version: runs outnumber both by far, and matching thousands of instances
// was most of a run's work.
type instanceViews struct {
	cache *controller.Cache

	mu sync.Mutex
	// generation counts instance changes (mapInstance bumps it); sorted
	// is the instances at sortedAt, nil when not made yet. It is shared
	// with the runs, which only read it; a change makes a new slice.
	generation uint64
	sortedAt   uint64
	sorted     []scheduler.InstanceView
	matches    map[string]matchMemo
}

// matchMemo is the instances that match an environment's version.
type matchMemo struct {
	generation uint64
	version    string
	matching   scheduler.Matching
}

func newInstanceViews(cache *controller.Cache) *instanceViews {
	return &instanceViews{cache: cache, matches: map[string]matchMemo{}}
}

// changed records that an instance changed: what was derived is stale.
func (v *instanceViews) changed() {
	v.mu.Lock()
	v.generation++
	v.mu.Unlock()
}

// forget drops what was derived for an environment (it was deleted).
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
	if v.sorted != nil && v.sortedAt == v.generation {
		return v.sorted
	}
	// Read after the generation: a change the list misses bumps it again.
	at := v.generation
	objs := v.cache.List(orchestrator.InstanceType) // sorted by name: instances have no namespace
	sorted := make([]scheduler.InstanceView, 0, len(objs))
	for _, o := range objs {
		if in, ok := controller.Decoded[*pborch.Instance](o); ok {
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
	if m, ok := v.matches[env]; ok && m.generation == v.sortedAt && m.version == version {
		return m.matching
	}
	m := scheduler.Match(all, group)
	v.matches[env] = matchMemo{generation: v.sortedAt, version: version, matching: m}
	return m
}

// envKey names an environment in the memo.
func envKey(id *pbresource.ID) string {
	return id.GetTenancy().GetNamespace() + "/" + id.GetName()
}

// taskViews keeps, per environment, its tasks from the cache as plans
// read them, and brings them up to date at the start of each run from the
// cache's current objects of the tasks that changed since (the mapper and
// the reconciler's own writes name them). Listing 5,000 tasks from the
// cache's index (which sorts them) and turning each into a view on every
// run would cost a run as much as its plan, in a rollout where every run
// follows a few task reports.
type taskViews struct {
	mu   sync.Mutex
	envs map[string]*envTasks
}

// envTasks is one environment's tasks. dirty and stale are guarded by
// taskViews.mu; the rest is only touched by the environment's reconcile,
// of which there is never more than one at a time.
type envTasks struct {
	dirty map[string]bool // names of tasks that changed since the last run
	stale bool            // list them all from the cache again

	uid    string // the incarnation the views are of
	byName map[string]*storedTask
}

func newTaskViews() *taskViews { return &taskViews{envs: map[string]*envTasks{}} }

// changed records that task name, owned by owner, changed in the cache.
func (v *taskViews) changed(owner *pbresource.ID, name string) {
	if owner == nil {
		return
	}
	key := envKey(owner)
	v.mu.Lock()
	defer v.mu.Unlock()
	if e := v.envs[key]; e != nil {
		e.dirty[name] = true
	}
}

// forget drops an environment's views (it was deleted).
func (v *taskViews) forget(env string) {
	v.mu.Lock()
	delete(v.envs, env)
	v.mu.Unlock()
}

// reset drops every view: they are made again from the cache.
func (v *taskViews) reset() {
	v.mu.Lock()
	v.envs = map[string]*envTasks{}
	v.mu.Unlock()
}

// of returns the tasks env owns in the cache, this incarnation's only (a
// task of an earlier one is not ours), in no order.
func (v *taskViews) of(cache *controller.Cache, env *pbresource.ID) []*storedTask {
	key := envKey(env)
	v.mu.Lock()
	e := v.envs[key]
	if e == nil {
		e = &envTasks{dirty: map[string]bool{}, stale: true}
		v.envs[key] = e
	}
	// Taken before the cache is read: a change the reads miss is named
	// again for the next run.
	var dirty map[string]bool // this run's; the mapper fills a new one
	if len(e.dirty) > 0 {
		dirty, e.dirty = e.dirty, map[string]bool{}
	}
	stale := e.stale || e.uid != env.GetUid()
	e.stale = false
	v.mu.Unlock()

	if stale {
		objs := cache.ByIndex(orchestrator.TaskType, controller.IndexOwner, controller.OwnerKey(env))
		e.uid, e.byName = env.GetUid(), make(map[string]*storedTask, len(objs))
		for _, o := range objs {
			e.update(o.Resource.GetId().GetName(), o, env)
		}
	} else {
		ns := env.GetTenancy().GetNamespace()
		for name := range dirty {
			e.update(name, cache.Get(orchestrator.TaskID(ns, name)), env)
		}
	}
	out := make([]*storedTask, 0, len(e.byName))
	for _, t := range e.byName {
		out = append(out, t)
	}
	return out
}

// update sets task name's view from o, what the cache holds of it (nil:
// nothing), keeping a view whose object did not change.
func (e *envTasks) update(name string, o *controller.Object, env *pbresource.ID) {
	if o == nil || o.Resource.GetOwner().GetUid() != env.GetUid() {
		delete(e.byName, name)
		return
	}
	t, ok := controller.Decoded[*pborch.Task](o)
	if !ok {
		delete(e.byName, name)
		return
	}
	if cur := e.byName[name]; cur != nil && cur.obj == o {
		return
	}
	e.byName[name] = &storedTask{obj: o, res: o.Resource, t: t, view: scheduler.TaskViewOf(env.GetName(), o.Resource, t)}
}
