package operations

import (
	"context"

	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler"
)

// placement reads what a diff needs to tell a blocked instance: what
// task definition ref (in namespace ns) asks of an instance, and, when it
// publishes fixed host ports, who holds host ports on an instance, as the
// controller's plans and the task run operation ask it
// (orchestrator.ReadPortHolders: the cache on the leader, the store
// elsewhere).
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
	holders, err := orchestrator.ReadPortHolders(ctx, o.API, o.Cache, ns)
	return needs, holders, err
}
