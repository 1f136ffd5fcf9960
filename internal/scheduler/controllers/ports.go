package controllers

import (
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

// blockedOn is the index of the cached environments by the instances
// their status lists as blocked (scheduler.BlockedOf), so that a change of
// a task on such an instance (the task holding the port stops) runs them
// again at once: the task may be of another environment, or run by hand,
// and so would not map to them. An environment whose list was cut at
// scheduler.MaxListedInstances is filed under blockedAnywhere too, and
// runs on a change of any task.
var blockedOn = &controller.Index{Name: "scheduler-blocked-on", Keys: func(o *controller.Object) []string {
	st, err := scheduler.EnvironmentStatusOf(o.Resource)
	if err != nil || len(st.GetBlocked()) == 0 {
		return nil
	}
	keys := make([]string, 0, len(st.GetBlocked())+1)
	for _, b := range st.GetBlocked() {
		keys = append(keys, b.GetInstance())
	}
	if len(st.GetBlocked()) >= scheduler.MaxListedInstances {
		keys = append(keys, blockedAnywhere)
	}
	return keys
}}

// blockedAnywhere is blockedOn's key of the environments blocked on more
// instances than their status lists; no instance is named so (a name is a
// DNS label).
const blockedAnywhere = "*"

// blockedBy are the environments blocked on the instance of a changed
// task, from the cache, which holds the task (unless it was deleted).
func blockedBy(cache *controller.Cache, task *pbresource.Resource) []controller.Request {
	var instance string
	if o := cache.Get(task.GetId()); o != nil {
		if t, ok := controller.Decoded[*pborch.Task](o); ok {
			instance = t.GetInstance()
		}
	} else if t, err := resource.DecodeData[*pborch.Task](task); err == nil {
		instance = t.GetInstance()
	}
	var out []controller.Request
	for _, key := range []string{instance, blockedAnywhere} {
		if key == "" {
			continue
		}
		for _, o := range cache.ByIndex(scheduler.EnvironmentType, blockedOn.Name, key) {
			id := o.Resource.GetId()
			out = append(out, controller.Request{ID: &pbresource.ID{Type: id.GetType(), Tenancy: id.GetTenancy(), Name: id.GetName()}})
		}
	}
	return out
}
