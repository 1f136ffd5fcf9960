package orchestrator

import (
	"fmt"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
)

// BridgeRefusal says why an instance with attrs cannot run a task whose
// network is bridge (bridge true); "" when it can, or the task is not
// bridge. The daemon scheduler's plans and the task run operation both
// ask it. It is pure.
func BridgeRefusal(bridge bool, attrs map[string]string) string {
	if !bridge {
		return ""
	}
	if v, ok := attrs[AttrNetworkBridge]; !ok {
		return fmt.Sprintf("the task definition's network is bridge, and the instance does not say it runs bridge tasks (no %s attribute)", AttrNetworkBridge)
	} else if v != "true" {
		return fmt.Sprintf("the task definition's network is bridge, and the instance cannot run bridge tasks (%s=%s)", AttrNetworkBridge, v)
	}
	return ""
}

// RunRefusal says why a task of definition td cannot be placed by hand
// (the task run operation) on instance name, in, now; "" when it can. An
// instance must be ready, have the drivers of td's containers (one that
// reports no drivers is not second-guessed), run bridge tasks when td is
// bridge (BridgeRefusal), and have every fixed host port td publishes
// free: holders are the instance's port holders (PortHolders). It is
// pure; what it reads may change before the task is written, and then the
// agent refuses what it cannot run.
func RunRefusal(td *pborch.TaskDefinition, name string, in *pborch.Instance, holders []PortHolder) string {
	if in.GetStatus() != InstanceReady {
		return fmt.Sprintf("instance %s is %s: tasks are placed only on ready instances", name, in.GetStatus())
	}
	for _, ct := range td.GetContainers() {
		if !driverAvailable(in, ct.GetDriver()) {
			return fmt.Sprintf("instance %s cannot run container %s: driver %s is not available there", name, ct.GetName(), ct.GetDriver())
		}
	}
	ref := TaskDefinitionRef(td.GetFamily(), td.GetRevision())
	if why := BridgeRefusal(NetworkMode(td) == NetworkBridge, in.GetAttributes()); why != "" {
		return fmt.Sprintf("instance %s cannot run %s: %s", name, ref, why)
	}
	for _, p := range FixedHostPorts(td) {
		if h, taken := PortHolderOf(holders, p, ""); taken {
			return fmt.Sprintf("instance %s cannot run %s: host port %s is taken by task %s", name, ref, p, h.Task)
		}
	}
	return ""
}

// driverAvailable reports whether instance in can run a container of
// driver name: it reports the driver available, or reports no drivers.
func driverAvailable(in *pborch.Instance, name string) bool {
	for _, d := range in.GetDrivers() {
		if d.GetName() == name {
			return d.GetAvailable()
		}
	}
	return len(in.GetDrivers()) == 0
}
