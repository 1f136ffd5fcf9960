package orchestrator

import (
	"context"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
)

// Which tasks hold which fixed host ports on an instance is answered in
// one place, for every placement: the daemon scheduler's plans and the
// task run operation. A task holds the fixed host ports its task
// definition publishes (FixedHostPorts) on its instance from the moment it
// is placed until its agent reports it STOPPED: a LOST task's agent may
// come back with it running. PortHolders is that rule, a pure function of
// the tasks and their definitions; LiveTasksByInstance is the index of
// the controllers' cache that narrows the tasks to those on one instance,
// so that a placement's question costs the tasks of its instance, not
// every task.

// HostPortsCached is what PortHoldersOn reads of the cache: the tasks,
// filed by LiveTasksByInstance, and the task definitions. A controller or
// an operation that asks declares them (controller.Cache.Declare).
var HostPortsCached = []controller.CachedType{
	{Type: TaskType, Indexes: []*controller.Index{LiveTasksByInstance}},
	{Type: TaskDefinitionType},
}

// liveInstance is the instance a task is placed on while it is live; ""
// when it is unplaced, STOPPED, or does not decode.
func liveInstance(o *controller.Object) string {
	t, ok := controller.Decoded[*pborch.Task](o)
	if !ok || t.GetInstance() == "" || TaskStatusOf(o.Resource).GetLastStatus() == StatusStopped {
		return ""
	}
	return t.GetInstance()
}

// PortHolder is a live task on an instance and the fixed host ports its
// task definition publishes there.
type PortHolder struct {
	// Task is the task's name, namespace/name when it is of another
	// namespace than the one asking, as a refusal names it.
	Task  string
	Ports []HostPort
}

// PortHolders returns the tasks among tasks that hold fixed host ports on
// instance, in the order of tasks, named for a placement in namespace ns.
// ports returns the fixed host ports of task definition ref of a
// namespace (FixedHostPorts; none when the definition is unknown: the
// agent refuses what it cannot run). It is pure: the same tasks and
// definitions give the same holders, whether the tasks come from the
// cache's index or from a list of every task.
func PortHolders(instance, ns string, tasks []*controller.Object, ports func(ns, ref string) []HostPort) []PortHolder {
	var out []PortHolder
	for _, o := range tasks {
		if liveInstance(o) != instance {
			continue
		}
		t, _ := controller.Decoded[*pborch.Task](o)
		id := o.Resource.GetId()
		tns := id.GetTenancy().GetNamespace()
		held := ports(tns, t.GetTaskDefinition())
		if len(held) == 0 {
			continue
		}
		name := id.GetName()
		if tns != ns {
			name = tns + "/" + name
		}
		out = append(out, PortHolder{Task: name, Ports: held})
	}
	return out
}

// PortHolderOf returns the holder of host port p among holders, leaving
// out the task named except ("" for none: a replacement takes over the
// ports of the task it replaces, which stops first); false when p is
// free. It is pure.
func PortHolderOf(holders []PortHolder, p HostPort, except string) (PortHolder, bool) {
	for _, h := range holders {
		if h.Task == except {
			continue
		}
		for _, q := range h.Ports {
			if q == p {
				return h, true
			}
		}
	}
	return PortHolder{}, false
}

// CachedHostPorts returns the fixed host ports of task definition ref of
// namespace ns as the cache holds it; none when it is not there.
func CachedHostPorts(cache *controller.Cache) func(ns, ref string) []HostPort {
	return func(ns, ref string) []HostPort {
		family, rev, err := ParseTaskDefinitionRef(ref)
		if err != nil || rev == 0 {
			return nil
		}
		o := cache.Get(TaskDefinitionID(ns, family, rev))
		if o == nil {
			return nil
		}
		td, ok := controller.Decoded[*pborch.TaskDefinition](o)
		if !ok {
			return nil
		}
		return FixedHostPorts(td)
	}
}

// PortHoldersOn is PortHolders of the cache's live tasks on instance (an
// index lookup, and a read of each of their definitions), for a placement
// in namespace ns. The cache must hold HostPortsCached.
func PortHoldersOn(cache *controller.Cache, instance, ns string) []PortHolder {
	return PortHolders(instance, ns, cache.ByIndex(TaskType, LiveTasksByInstance.Name, instance), CachedHostPorts(cache))
}

// ReadPortHolders returns who holds fixed host ports on an instance, for
// a placement in namespace ns, as PortHolders answers it. On the leader,
// whose cache holds HostPortsCached listed whole, it answers from the
// cache (an index lookup per instance asked). Elsewhere (a follower's
// cache is empty) it reads the store once: every task of every namespace,
// and each definition they run; an operation asks rarely enough for that.
func ReadPortHolders(ctx context.Context, api resource.API, cache *controller.Cache, ns string) (func(instance string) []PortHolder, error) {
	if cachedPortHolders(cache) {
		return func(instance string) []PortHolder { return PortHoldersOn(cache, instance, ns) }, nil
	}
	list, err := api.List(ctx, &pbresource.ListRequest{Type: TaskType, Tenancy: &pbresource.Tenancy{Namespace: ids.WildcardNamespace}})
	if err != nil {
		return nil, err
	}
	byInstance := map[string][]*controller.Object{}
	for _, r := range list.GetResources() {
		t, err := resource.DecodeData[*pborch.Task](r)
		if err != nil {
			continue
		}
		o := &controller.Object{Resource: r, Data: t}
		if in := liveInstance(o); in != "" {
			byInstance[in] = append(byInstance[in], o)
		}
	}
	defs := map[string][]HostPort{} // namespace/ref -> its fixed host ports
	ports := func(ns, ref string) []HostPort {
		key := ns + "/" + ref
		held, seen := defs[key]
		if !seen {
			held = storedHostPorts(ctx, api, ns, ref)
			defs[key] = held
		}
		return held
	}
	holders := map[string][]PortHolder{}
	for in, tasks := range byInstance {
		if h := PortHolders(in, ns, tasks, ports); len(h) > 0 {
			holders[in] = h
		}
	}
	return func(instance string) []PortHolder { return holders[instance] }, nil
}

// cachedPortHolders reports whether the cache can answer PortHoldersOn:
// it holds HostPortsCached, and this term's watches listed them whole.
func cachedPortHolders(cache *controller.Cache) bool {
	return cache != nil && cache.Indexed(TaskType, LiveTasksByInstance.Name) &&
		cache.Synced(TaskType) && cache.Synced(TaskDefinitionType)
}

// storedHostPorts are the fixed host ports of task definition ref of
// namespace ns as the store holds it; none when it is not there.
func storedHostPorts(ctx context.Context, api resource.API, ns, ref string) []HostPort {
	family, rev, err := ParseTaskDefinitionRef(ref)
	if err != nil || rev == 0 {
		return nil
	}
	resp, err := api.Read(ctx, &pbresource.ReadRequest{Id: TaskDefinitionID(ns, family, rev)})
	if err != nil {
		return nil
	}
	td, err := resource.DecodeData[*pborch.TaskDefinition](resp.GetResource())
	if err != nil {
		return nil
	}
	return FixedHostPorts(td)
}
