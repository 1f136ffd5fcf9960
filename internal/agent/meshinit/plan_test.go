package meshinit

import (
	"net/netip"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

func taskOf(td *pborch.TaskDefinition, nw component.Network) component.Task {
	id := orchestrator.TaskID("prod", "web-7")
	id.Uid = "u1"
	return component.Task{ID: id, Definition: td, Network: nw}
}

func ctr(name string, essential bool, check bool) *pborch.ContainerDefinition {
	c := &pborch.ContainerDefinition{Name: name, Driver: "exec", Command: []string{"app"}, Essential: proto.Bool(essential)}
	if check {
		c.HealthCheck = &pborch.HealthCheck{Command: []string{"true"}}
	}
	return c
}

func TestPlan(t *testing.T) {
	host := component.Network{Mode: orchestrator.NetworkHost}
	bridge := component.Network{Mode: orchestrator.NetworkBridge, Address: netip.MustParsePrefix("10.200.0.7/16")}
	mesh := func(m *pborch.TaskMesh, cs ...*pborch.ContainerDefinition) *pborch.TaskDefinition {
		return &pborch.TaskDefinition{Family: "webapp", Revision: 3, Containers: cs, Mesh: m}
	}
	for _, tc := range []struct {
		name     string
		td       *pborch.TaskDefinition
		nw       component.Network
		want     *pbcatalog.ServiceInstance
		protocol string
		err      string
	}{
		{
			name: "no mesh block", td: &pborch.TaskDefinition{Family: "batch", Containers: []*pborch.ContainerDefinition{ctr("app", true, true)}}, nw: host,
		},
		{
			name: "host: the instance's address, the app's port, the task's own check",
			td:   mesh(&pborch.TaskMesh{Port: 8080}, ctr("app", true, false)), nw: host,
			want: &pbcatalog.ServiceInstance{Service: "webapp", Address: "192.0.2.10", Port: 8080,
				Proxy: &pbcatalog.Proxy{Port: 15000, Mode: "local"}, Instance: "i-1", Task: "web-7",
				Checks: []*pbcatalog.CheckDefinition{{Name: "web-7"}}},
			protocol: "tcp",
		},
		{
			name: "bridge: the task's address; a check per essential container with a health check",
			td: mesh(&pborch.TaskMesh{Service: "web", Port: 9090, Protocol: "grpc", Transparent: true, Tags: []string{"v1", "canary"}, Meta: map[string]string{"team": "payments"}},
				ctr("app", true, true), ctr("logs", false, true), ctr("init", true, false), ctr("admin", true, true)),
			nw: bridge,
			want: &pbcatalog.ServiceInstance{Service: "web", Address: "10.200.0.7", Port: 9090,
				Proxy: &pbcatalog.Proxy{Port: 15000, Mode: "transparent"}, Instance: "i-1", Task: "web-7",
				Tags: []string{"v1", "canary"}, Meta: map[string]string{"team": "payments"},
				Checks: []*pbcatalog.CheckDefinition{{Name: "web-7/app"}, {Name: "web-7/admin"}}},
			protocol: "grpc",
		},
		{
			name: "bridge without an address", td: mesh(&pborch.TaskMesh{Port: 8080}, ctr("app", true, false)),
			nw: component.Network{Mode: orchestrator.NetworkBridge}, err: "has no address in its network namespace",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tk := taskOf(tc.td, tc.nw)
			reg, err := Plan(tk, "i-1", "192.0.2.10")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Plan = %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if reg != nil || InstanceID(tk) != nil {
					t.Fatalf("Plan = %v, InstanceID = %v; want nothing for a task without a mesh block", reg, InstanceID(tk))
				}
				return
			}
			si, err := resource.DecodeData[*pbcatalog.ServiceInstance](reg.Instance)
			if err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(si, tc.want) {
				t.Errorf("instance %v\nwant %v", si, tc.want)
			}
			if id := reg.Instance.GetId(); !proto.Equal(id, catalog.ServiceInstanceID("prod", "web-7")) || !proto.Equal(id, InstanceID(tk)) {
				t.Errorf("instance id %v", id)
			}
			if !proto.Equal(reg.Instance.GetOwner(), tk.ID) {
				t.Errorf("owner %v, want the task %v", reg.Instance.GetOwner(), tk.ID)
			}
			// What is planned is what the catalog accepts.
			if err := catalog.ValidateServiceInstance(reg.Instance); err != nil {
				t.Errorf("the catalog refuses the planned instance: %v", err)
			}
			svc, err := resource.DecodeData[*pbcatalog.Service](reg.Service)
			if err != nil {
				t.Fatal(err)
			}
			if want := (&pbresource.ID{Type: catalog.ServiceType, Tenancy: &pbresource.Tenancy{Namespace: "prod"}, Name: tc.want.GetService()}); !proto.Equal(reg.Service.GetId(), want) {
				t.Errorf("service id %v, want %v", reg.Service.GetId(), want)
			}
			if svc.GetProtocol() != tc.protocol || !svc.GetMesh() {
				t.Errorf("service %v, want protocol %s in the mesh", svc, tc.protocol)
			}
			if err := catalog.ValidateService(reg.Service); err != nil {
				t.Errorf("the catalog refuses the planned service: %v", err)
			}
		})
	}
}
