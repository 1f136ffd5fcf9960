package orchestrator_test

import (
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// RunRefusal: why a task run by hand cannot go on an instance, checked in
// order (ready, drivers, bridge, host ports), or "" when it can.
func TestRunRefusal(t *testing.T) {
	web := &pborch.TaskDefinition{Family: "web", Revision: 2, Network: orchestrator.NetworkBridge,
		Containers: []*pborch.ContainerDefinition{{Name: "app", Driver: "docker"}},
		Ports:      []*pborch.PortMapping{{Name: "http", ContainerPort: 80, HostPort: 8080, Protocol: orchestrator.ProtocolTCP}}}
	host := &pborch.TaskDefinition{Family: "cron", Revision: 1, Containers: []*pborch.ContainerDefinition{{Name: "job", Driver: "exec"}}}
	ready := func(attrs map[string]string, drivers ...*pborch.DriverInfo) *pborch.Instance {
		return &pborch.Instance{Status: orchestrator.InstanceReady, Attributes: attrs, Drivers: drivers}
	}
	bridge := map[string]string{orchestrator.AttrNetworkBridge: "true"}
	holder := []orchestrator.PortHolder{{Task: "team-b/t9", Ports: []orchestrator.HostPort{tcp(8080)}}}
	for _, tc := range []struct {
		name    string
		td      *pborch.TaskDefinition
		in      *pborch.Instance
		holders []orchestrator.PortHolder
		want    string
	}{
		{"free", web, ready(bridge), nil, ""},
		{"a host task asks nothing of the network", host, ready(nil), holder, ""},
		{"draining", web, &pborch.Instance{Status: orchestrator.InstanceDraining, Attributes: bridge}, nil,
			"instance i1 is draining: tasks are placed only on ready instances"},
		{"down, whatever else", web, &pborch.Instance{Status: orchestrator.InstanceDown}, holder,
			"instance i1 is down: tasks are placed only on ready instances"},
		{"a driver reported unavailable", web, ready(bridge, &pborch.DriverInfo{Name: "docker", Available: false}), nil,
			"instance i1 cannot run container app: driver docker is not available there"},
		{"a driver not reported among others", web, ready(bridge, &pborch.DriverInfo{Name: "exec", Available: true}), nil,
			"instance i1 cannot run container app: driver docker is not available there"},
		{"no drivers reported: not second-guessed", web, ready(bridge), nil, ""},
		{"no bridge attribute", web, ready(nil), nil,
			"instance i1 cannot run web:2: the task definition's network is bridge, and the instance does not say it runs bridge tasks (no network.bridge attribute)"},
		{"bridge false", web, ready(map[string]string{orchestrator.AttrNetworkBridge: "false"}), nil,
			"instance i1 cannot run web:2: the task definition's network is bridge, and the instance cannot run bridge tasks (network.bridge=false)"},
		{"a fixed host port held", web, ready(bridge), holder,
			"instance i1 cannot run web:2: host port 8080/tcp is taken by task team-b/t9"},
		{"the same number over udp is another port", web, ready(bridge), []orchestrator.PortHolder{{Task: "t1", Ports: []orchestrator.HostPort{{Port: 8080, Protocol: orchestrator.ProtocolUDP}}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := orchestrator.RunRefusal(tc.td, "i1", tc.in, tc.holders); got != tc.want {
				t.Fatalf("RunRefusal = %q\nwant %q", got, tc.want)
			}
		})
	}
}
