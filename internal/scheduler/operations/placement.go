package operations

import (
	"context"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
)

// placement reads what a diff needs to tell a blocked instance: what
// task definition ref (in namespace ns) asks of an instance, and, when it
// publishes fixed host ports, which live tasks hold host ports on which
// instance, of every namespace. The controller reads the same from its
// cache; a diff is asked for rarely enough to read the store: one list of
// the tasks, and one read per task definition they run.
func (o *Operations) placement(ctx context.Context, ns, ref string) (scheduler.Needs, func(string) []scheduler.PortHolder, error) {
	_, td, err := o.taskDefinition(ctx, ns, "task_definition", ref)
	if err != nil {
		// A version whose task definition is gone: nothing to check.
		return scheduler.Needs{}, nil, nil
	}
	needs := scheduler.NeedsOf(td)
	if len(needs.HostPorts) == 0 {
		return needs, nil, nil
	}
	list, err := o.API.List(ctx, &pbresource.ListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: ids.WildcardNamespace}})
	if err != nil {
		return needs, nil, err
	}
	defs := map[string][]orchestrator.HostPort{} // namespace/ref -> its fixed host ports
	byInstance := map[string][]scheduler.PortHolder{}
	for _, r := range list.GetResources() {
		t, err := resource.DecodeData[*pborch.Task](r)
		if err != nil || t.GetInstance() == "" || orchestrator.TaskStatusOf(r).GetLastStatus() == orchestrator.StatusStopped {
			continue
		}
		tns := r.GetId().GetTenancy().GetNamespace()
		key := tns + "/" + t.GetTaskDefinition()
		ports, seen := defs[key]
		if !seen {
			if _, td, err := o.taskDefinition(ctx, tns, "task_definition", t.GetTaskDefinition()); err == nil {
				ports = orchestrator.FixedHostPorts(td)
			}
			defs[key] = ports
		}
		if len(ports) == 0 {
			continue
		}
		name := r.GetId().GetName()
		if tns != ns {
			name = tns + "/" + name
		}
		byInstance[t.GetInstance()] = append(byInstance[t.GetInstance()], scheduler.PortHolder{Task: name, Ports: ports})
	}
	return needs, func(instance string) []scheduler.PortHolder { return byInstance[instance] }, nil
}
