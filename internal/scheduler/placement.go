package scheduler

import (
	"fmt"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// Needs is what a task definition asks of an instance beyond the
// instance group: that it runs bridge tasks, and that the host ports it
// publishes by number are free there. The zero Needs asks nothing.
type Needs struct {
	// Bridge: the definition's network is bridge, which only an instance
	// whose network.bridge attribute is "true" runs.
	Bridge bool
	// HostPorts are the fixed host ports it publishes (host_port 0 is any
	// free one and is not among them), sorted.
	HostPorts []orchestrator.HostPort
}

// NeedsOf is what task definition td asks of an instance.
func NeedsOf(td *pborch.TaskDefinition) Needs {
	return Needs{Bridge: orchestrator.NetworkMode(td) == orchestrator.NetworkBridge, HostPorts: orchestrator.FixedHostPorts(td)}
}

// PortHolder is a live task on an instance and the fixed host ports it
// holds there (orchestrator.PortHolders is who holds what).
type PortHolder = orchestrator.PortHolder

// Blocked says why a task definition with needs cannot be placed now on
// an instance with attrs, in words an operator reads in a deployment or
// an environment's status; "" when it can. holders are the live tasks on
// the instance that publish fixed host ports; the task the placement
// replaces (replaces, "" for none) is not in the way: the agent starts
// the new task only once it has stopped, and so its ports are free. It is
// pure.
func Blocked(needs Needs, attrs map[string]string, holders []PortHolder, replaces string) string {
	if why := orchestrator.BridgeRefusal(needs.Bridge, attrs); why != "" {
		return why
	}
	for _, want := range needs.HostPorts {
		if h, taken := orchestrator.PortHolderOf(holders, want, replaces); taken {
			return fmt.Sprintf("host port %s is taken by task %s", want, h.Task)
		}
	}
	return ""
}

// blocked is Blocked for the target on instance in, asking for the
// instance's port holders only when the target publishes fixed host
// ports.
func (t Target) blocked(in *InstanceView, replaces string) string {
	if !t.Needs.Bridge && len(t.Needs.HostPorts) == 0 {
		return ""
	}
	var holders []PortHolder
	if len(t.Needs.HostPorts) > 0 && t.PortHolders != nil {
		holders = t.PortHolders(in.Name)
	}
	return Blocked(t.Needs, in.Attributes, holders, replaces)
}

// BlockedOf lists the instances a plan found blocked, with why, for the
// environment's status (at most MaxListedInstances of them; the plan's
// instances are sorted).
func BlockedOf(plan Plan) []*pbscheduler.BlockedInstance {
	var out []*pbscheduler.BlockedInstance
	for _, ip := range plan.Instances {
		if ip.State == StateBlocked && len(out) < MaxListedInstances {
			out = append(out, &pbscheduler.BlockedInstance{Instance: ip.Instance, Reason: ip.Blocked})
		}
	}
	return out
}
