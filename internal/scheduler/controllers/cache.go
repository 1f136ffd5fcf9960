package controllers

import (
	"slices"
	"strconv"
	"strings"
	"sync"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// cache holds the instances and every environment's tasks, decoded, so
// that a reconcile does not list and decode thousands of resources from
// the store each time. It is fed by the controller's watches (through its
// mappers) and by the reconciler's own writes, and keeps for each
// resource the newest version it has seen, so events arriving late never
// roll it back.
//
// Correctness does not rest on it being current: placements are
// create-only writes of names the store decides, and every other write is
// a CAS on the version read, so a stale entry makes a write fail and the
// reconcile run again. It does rest on it being complete: a task missing
// from it could make the plan reuse a task name whose older task was
// deleted. So an environment's tasks (and the instances) are read from
// the store once, at first use (priming), and kept current from there.
type cache struct {
	mu        sync.Mutex
	instances map[string]cachedInstance
	// sorted is the live instances by name, made again after a change
	// (nil then): every run plans over them, and instances change far
	// less often than runs happen. It is shared with the runs, which only
	// read it; a change makes a new slice.
	sorted []scheduler.InstanceView
	// generation counts instance changes; matches keeps, per environment,
	// which instances matched the instance group of its version at a
	// generation.
	generation uint64
	matches    map[string]matchMemo
	// instancesPrimed: the instances were listed from the store once.
	instancesPrimed bool
	// tasks by environment key (namespace/name), then by task name.
	tasks  map[string]map[string]*storedTask
	primed map[string]bool
	// deleted keeps, while an environment is being primed, the version at
	// which each of its tasks was seen deleted, so that the listing (which
	// may predate the delete) does not bring it back.
	deleted map[string]map[string]uint64
}

// matchMemo is the instances that match an environment's version.
type matchMemo struct {
	generation uint64
	version    string
	matching   scheduler.Matching
}

type cachedInstance struct {
	view    scheduler.InstanceView
	version uint64
	gone    bool
}

func newCache() *cache {
	return &cache{instances: map[string]cachedInstance{}, matches: map[string]matchMemo{}, tasks: map[string]map[string]*storedTask{}, primed: map[string]bool{}, deleted: map[string]map[string]uint64{}}
}

func versionOf(res *pbresource.Resource) uint64 {
	v, _ := strconv.ParseUint(res.GetVersion(), 10, 64)
	return v
}

// envKey names an environment in the cache.
func envKey(id *pbresource.ID) string {
	return id.GetTenancy().GetNamespace() + "/" + id.GetName()
}

// observeInstance records an instance change.
func (c *cache) observeInstance(res *pbresource.Resource, deleted bool) {
	name, v := res.GetId().GetName(), versionOf(res)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.instances[name]; ok && (old.version > v || (old.version == v && (old.gone || !deleted))) {
		return // older, or already seen at this version
	}
	c.sorted = nil
	c.generation++
	if deleted {
		c.instances[name] = cachedInstance{version: v, gone: true}
		return
	}
	view, ok := scheduler.InstanceViewOf(res)
	if !ok {
		return
	}
	c.instances[name] = cachedInstance{view: view, version: v}
}

// observeTask records a change of a task owned by an environment.
func (c *cache) observeTask(res *pbresource.Resource, deleted bool) {
	owner := res.GetOwner()
	if owner == nil || !ids.SameType(owner.GetType(), scheduler.EnvironmentType) {
		return
	}
	key, name, v := envKey(owner), res.GetId().GetName(), versionOf(res)
	c.mu.Lock()
	defer c.mu.Unlock()
	tasks := c.tasks[key]
	if tasks == nil {
		return // not primed: it is read whole from the store at first use
	}
	if old, ok := tasks[name]; ok && (versionOf(old.res) > v || (versionOf(old.res) == v && !deleted)) {
		return // older, or the same version again (a resync): nothing to decode
	}
	if deleted {
		delete(tasks, name)
		if tomb := c.deleted[key]; tomb != nil {
			tomb[name] = max(tomb[name], v)
		}
		return
	}
	t, err := resource.DecodeData[*pborch.Task](res)
	if err != nil {
		return
	}
	tasks[name] = &storedTask{res: res, t: t, view: scheduler.TaskViewOf(owner.GetName(), res, t)}
}

// written records what a reconcile wrote (the store's answers), before
// its watch brings it.
func (c *cache) written(out []*pbresource.Resource) {
	for _, res := range out {
		if ids.SameType(res.GetId().GetType(), scheduler.EnvironmentType) {
			continue
		}
		if ids.SameType(res.GetId().GetType(), orchestrator.TaskType) {
			c.observeTask(res, false)
		}
	}
}

// forgetEnvironment drops an environment's tasks (it was deleted).
func (c *cache) forgetEnvironment(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tasks, key)
	delete(c.matches, key)
	delete(c.primed, key)
	delete(c.deleted, key)
}

// reset empties the cache: nothing is primed any more.
func (c *cache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.instances = map[string]cachedInstance{}
	c.sorted = nil
	c.generation++
	c.matches = map[string]matchMemo{}
	c.instancesPrimed = false
	c.tasks = map[string]map[string]*storedTask{}
	c.primed = map[string]bool{}
	c.deleted = map[string]map[string]uint64{}
}

// beginPrime starts recording an environment's task changes, before its
// tasks are listed from the store.
func (c *cache) beginPrime(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tasks[key] == nil {
		c.tasks[key] = map[string]*storedTask{}
		c.deleted[key] = map[string]uint64{}
	}
}

// primeInstances fills the instances from a store listing, once.
func (c *cache) primeInstances(list []*pbresource.Resource) {
	for _, res := range list {
		c.observeInstance(res, false)
	}
	c.mu.Lock()
	c.instancesPrimed = true
	c.mu.Unlock()
}

// primeTasks fills an environment's tasks from a store listing.
func (c *cache) primeTasks(key string, owned []*storedTask) {
	c.mu.Lock()
	defer c.mu.Unlock()
	// What the watches brought since beginPrime is as new as the listing
	// or newer: it wins, and what they saw deleted stays deleted.
	tasks := c.tasks[key]
	if tasks == nil {
		tasks = map[string]*storedTask{}
	}
	tomb := c.deleted[key]
	for _, t := range owned {
		name := t.res.GetId().GetName()
		if cur, ok := tasks[name]; ok && versionOf(cur.res) >= versionOf(t.res) {
			continue
		}
		if v, ok := tomb[name]; ok && v >= versionOf(t.res) {
			continue
		}
		tasks[name] = t
	}
	c.tasks[key] = tasks
	delete(c.deleted, key)
	c.primed[key] = true
}

// snapshot returns the instances, sorted by name (empty when never
// primed; the caller must not modify the slice), and the environment's
// tasks (nil, false when never primed).
func (c *cache) snapshot(key string) ([]scheduler.InstanceView, bool, []*storedTask, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ins := c.sortedLocked()
	var tasks []*storedTask
	for _, t := range c.tasks[key] {
		tasks = append(tasks, t)
	}
	return ins, c.instancesPrimed, tasks, c.primed[key]
}

func (c *cache) sortedLocked() []scheduler.InstanceView {
	if c.sorted == nil {
		c.sorted = make([]scheduler.InstanceView, 0, len(c.instances))
		for _, in := range c.instances {
			if !in.gone {
				c.sorted = append(c.sorted, in.view)
			}
		}
		slices.SortFunc(c.sorted, func(a, b scheduler.InstanceView) int { return strings.Compare(a.Name, b.Name) })
	}
	return c.sorted
}

// matching is the instances that match group, the instance group of the
// environment's version, worked out again only when an instance changed
// or the environment moved to another version: runs outnumber both by
// far, and matching thousands of instances was most of a run's work. The
// caller must not modify what it returns.
func (c *cache) matching(key, version string, group scheduler.Group) scheduler.Matching {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.matches[key]; ok && m.generation == c.generation && m.version == version {
		return m.matching
	}
	m := scheduler.Match(c.sortedLocked(), group)
	c.matches[key] = matchMemo{generation: c.generation, version: version, matching: m}
	return m
}
