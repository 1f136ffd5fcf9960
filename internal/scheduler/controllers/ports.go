package controllers

import (
	"sync"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// What a task definition asks of an instance (a bridge network, fixed
// host ports) is read from the controllers' cache, which holds the task
// definitions and files the live tasks by instance
// (orchestrator.LiveTasksByInstance, shared with the task run operation).
// A plan asks for an instance's port holders only where it is about to
// place a task of a definition that publishes fixed host ports, so
// environments without them cost nothing more.
//
// Two environments whose definitions publish the same fixed host port
// could each decide, at the same moment on two workers, to place on the
// same instance, each before the other's task is in the cache. The runs
// of environments that publish fixed host ports are therefore planned
// and written one at a time (portsMu): a run's placements are in the
// cache (writeBatch applies them) before the next run reads it. Runs of
// other environments do not wait.

// taskDefinition returns the task definition ref ("family:revision") of
// namespace ns from the cache; nil when it is not there.
func (r *reconciler) taskDefinition(ns, ref string) *pborch.TaskDefinition {
	family, rev, err := orchestrator.ParseTaskDefinitionRef(ref)
	if err != nil || rev == 0 {
		return nil
	}
	o := r.cache.Get(orchestrator.TaskDefinitionID(ns, family, rev))
	if o == nil {
		return nil
	}
	td, _ := controller.Decoded[*pborch.TaskDefinition](o)
	return td
}

// needs is what environment env's target, task definition ref, asks of
// an instance. A definition the cache does not hold asks nothing: the
// agent refuses what it cannot run.
func (r *reconciler) needs(ns, ref string) scheduler.Needs {
	td := r.taskDefinition(ns, ref)
	if td == nil {
		return scheduler.Needs{}
	}
	return scheduler.NeedsOf(td)
}

// portHolders returns, for the plans of an environment of namespace ns,
// the live tasks on an instance whose definitions publish fixed host
// ports: of every namespace and environment, and those run by hand. It is
// the task run operation's answer too (orchestrator.PortHoldersOn): an
// index lookup of the instance's live tasks, and their definitions.
func (r *reconciler) portHolders(ns string) func(instance string) []scheduler.PortHolder {
	return func(instance string) []scheduler.PortHolder {
		return orchestrator.PortHoldersOn(r.cache, instance, ns)
	}
}

// lockPorts serializes the runs that may place fixed host ports (see
// above) and returns the unlock; it does nothing for the others.
func (r *reconciler) lockPorts(needs scheduler.Needs) func() {
	if len(needs.HostPorts) == 0 {
		return func() {}
	}
	r.portsMu.Lock()
	return r.portsMu.Unlock
}

// blockedEnvs remembers which environments have instances blocked, so
// that a change of a task on such an instance (the task holding the port
// stops) runs them again at once: the task may be of another environment,
// or run by hand, and so would not map to them.
type blockedEnvs struct {
	mu    sync.Mutex
	on    map[string]map[string]*pbresource.ID // instance -> env key -> env
	where map[string][]string                  // env key -> instances
}

func newBlockedEnvs() *blockedEnvs {
	return &blockedEnvs{on: map[string]map[string]*pbresource.ID{}, where: map[string][]string{}}
}

// reset forgets every environment.
func (b *blockedEnvs) reset() {
	b.mu.Lock()
	b.on, b.where = map[string]map[string]*pbresource.ID{}, map[string][]string{}
	b.mu.Unlock()
}

// set records the instances where env is blocked now (none: forget it).
func (b *blockedEnvs) set(env *pbresource.ID, instances []string) {
	key := envKey(env)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, in := range b.where[key] {
		delete(b.on[in], key)
		if len(b.on[in]) == 0 {
			delete(b.on, in)
		}
	}
	delete(b.where, key)
	if len(instances) == 0 {
		return
	}
	id := &pbresource.ID{Type: env.GetType(), Tenancy: env.GetTenancy(), Name: env.GetName()}
	for _, in := range instances {
		if b.on[in] == nil {
			b.on[in] = map[string]*pbresource.ID{}
		}
		b.on[in][key] = id
	}
	b.where[key] = instances
}

// requests are the environments blocked on the instance of a changed
// task; cache holds the task decoded (the cache is fed before mappers
// run), unless it was deleted.
func (b *blockedEnvs) requests(cache *controller.Cache, task *pbresource.Resource) []controller.Request {
	b.mu.Lock()
	empty := len(b.on) == 0
	b.mu.Unlock()
	if empty {
		return nil // the common case: nothing to look up
	}
	var t *pborch.Task
	if o := cache.Get(task.GetId()); o != nil {
		t, _ = controller.Decoded[*pborch.Task](o)
	}
	if t == nil {
		var err error
		if t, err = resource.DecodeData[*pborch.Task](task); err != nil {
			return nil
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []controller.Request
	for _, id := range b.on[t.GetInstance()] {
		out = append(out, controller.Request{ID: id})
	}
	return out
}

// blockedInstances are the instances a plan found blocked.
func blockedInstances(plan scheduler.Plan) []string {
	var out []string
	for _, ip := range plan.Instances {
		if ip.State == scheduler.StateBlocked {
			out = append(out, ip.Instance)
		}
	}
	return out
}
