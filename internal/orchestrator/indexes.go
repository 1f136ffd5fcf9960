package orchestrator

import (
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/controller"
)

// LiveTasksByInstance is the index of the controllers' cache
// (controller.Cache) that files a task under the instance it is placed on
// until its agent reports it STOPPED (a LOST task stays: its agent may
// come back with it), and no other task: the tasks that may hold host
// ports there (PortHolders), and those the task controller may mark LOST
// when the instance goes down. A task leaves it when it stops or is
// deleted; the runtime keeps it. It is declared once here so that every
// controller and operation that looks tasks up by instance shares one
// index. An environment's tasks are found by their owner, the cache's
// built-in controller.IndexOwner.
var LiveTasksByInstance = &controller.Index{Name: "live-on-instance", Keys: func(o *controller.Object) []string {
	if instance := liveInstance(o); instance != "" {
		return []string{instance}
	}
	return nil
}}

// MergedInstance is the Instance as every reader sees it (InstanceOf:
// the data, its agent's registration, the servers' down verdict), which
// the controllers' cache works out once per object as it applies it,
// instead of every controller merging every instance on every run (the
// scheduler lists them all whenever one changes). A controller that
// caches Instances declares it; CachedInstance reads it.
var MergedInstance = &controller.Derived{Name: "orchestrator-merged-instance", Make: func(o *controller.Object) any {
	in, ok := controller.Decoded[*pborch.Instance](o)
	if !ok {
		return nil
	}
	return InstanceOf(o.Resource, in)
}}

// CachedInstance is the merged Instance of a cache object: the cache's
// MergedInstance when the type declares it, else merged here. false when
// the object's data is not an Instance. The result is shared: never
// modify it.
func CachedInstance(o *controller.Object) (*pborch.Instance, bool) {
	if in, ok := controller.DerivedOf[*pborch.Instance](o, MergedInstance); ok {
		return in, true
	}
	in, ok := controller.Decoded[*pborch.Instance](o)
	if !ok {
		return nil, false
	}
	return InstanceOf(o.Resource, in), true
}
