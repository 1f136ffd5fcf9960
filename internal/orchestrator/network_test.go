package orchestrator_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// bridgeDefinition is a bridge task publishing two ports: http on a fixed
// host port, metrics on one the agent picks.
func bridgeDefinition() *pborch.TaskDefinition {
	td := webDefinition()
	td.Containers[0].Ports = nil
	td.Network = "bridge"
	td.Ports = []*pborch.PortMapping{
		{Name: "http", ContainerPort: 8080, HostPort: 80},
		{Name: "metrics", ContainerPort: 9100, Protocol: "tcp"},
	}
	return td
}

func validated(t *testing.T, td *pborch.TaskDefinition) (*pborch.TaskDefinition, error) {
	t.Helper()
	res := taskDefResource(t, td)
	if err := orchestrator.MutateTaskDefinition(res); err != nil {
		t.Fatal(err)
	}
	var stored pborch.TaskDefinition
	if err := res.GetData().UnmarshalTo(&stored); err != nil {
		t.Fatal(err)
	}
	return &stored, orchestrator.ValidateTaskDefinition(res)
}

func TestNetworkAccepted(t *testing.T) {
	for name, edit := range map[string]func(td *pborch.TaskDefinition){
		"bridge with ports":    func(*pborch.TaskDefinition) {},
		"bridge without ports": func(td *pborch.TaskDefinition) { td.Ports = nil },
		"udp beside tcp on the same numbers": func(td *pborch.TaskDefinition) {
			td.Ports = append(td.Ports, &pborch.PortMapping{Name: "dns", ContainerPort: 8080, HostPort: 80, Protocol: "udp"})
		},
		"two ports the agent picks": func(td *pborch.TaskDefinition) {
			td.Ports = append(td.Ports, &pborch.PortMapping{Name: "admin", ContainerPort: 9901})
		},
		"host port 65535": func(td *pborch.TaskDefinition) { td.Ports[0].HostPort = 65535 },
		"host, named":     func(td *pborch.TaskDefinition) { td.Network, td.Ports = "host", nil },
	} {
		t.Run(name, func(t *testing.T) {
			td := bridgeDefinition()
			edit(td)
			if _, err := validated(t, td); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A host task (the example) keeps its containers' ports.
	if _, err := validated(t, webDefinition()); err != nil {
		t.Fatal(err)
	}
}

func TestNetworkDefaults(t *testing.T) {
	stored, err := validated(t, bridgeDefinition())
	if err != nil {
		t.Fatal(err)
	}
	if got := stored.GetPorts()[0].GetProtocol(); got != "tcp" {
		t.Fatalf("protocol stored as %q, want tcp filled in", got)
	}
	if got := orchestrator.NetworkMode(webDefinition()); got != "host" {
		t.Fatalf("a definition without network is %q, want host", got)
	}
}

func TestNetworkRefusals(t *testing.T) {
	cases := []struct {
		name string
		edit func(td *pborch.TaskDefinition)
		want string
	}{
		{"unknown mode", func(td *pborch.TaskDefinition) { td.Network = "awsvpc" },
			`data.network: "awsvpc" is not a network mode: host (the default) or bridge`},
		{"upper case mode", func(td *pborch.TaskDefinition) { td.Network = "Bridge" },
			`data.network: "Bridge" is not a network mode`},
		{"ports on host", func(td *pborch.TaskDefinition) { td.Network = "" },
			`data.ports: only with network "bridge"`},
		{"ports on host, named", func(td *pborch.TaskDefinition) { td.Network = "host" },
			`data.ports: only with network "bridge"`},
		{"container ports in bridge", func(td *pborch.TaskDefinition) { td.Containers[1].Ports = []uint32{9000} },
			`data.containers[1].ports: a bridge task publishes its ports in the task's ports, not a container's`},
		{"host port out of range", func(td *pborch.TaskDefinition) { td.Ports[1].HostPort = 70000 },
			`data.ports[1].host_port: 70000 is out of range 0-65535`},
		{"container port zero", func(td *pborch.TaskDefinition) { td.Ports[0].ContainerPort = 0 },
			`data.ports[0].container_port: 0 is out of range 1-65535`},
		{"container port out of range", func(td *pborch.TaskDefinition) { td.Ports[1].ContainerPort = 65536 },
			`data.ports[1].container_port: 65536 is out of range 1-65535`},
		{"no name", func(td *pborch.TaskDefinition) { td.Ports[1].Name = "" },
			`data.ports[1].name: is required`},
		{"name not a DNS label", func(td *pborch.TaskDefinition) { td.Ports[1].Name = "Metrics_1" },
			`data.ports[1].name: "Metrics_1" is not a valid name`},
		{"duplicate name", func(td *pborch.TaskDefinition) { td.Ports[1].Name = "http" },
			`data.ports[1].name: "http" is also the name of ports[0]`},
		{"bad protocol", func(td *pborch.TaskDefinition) { td.Ports[1].Protocol = "sctp" },
			`data.ports[1].protocol: "sctp" is not a protocol: tcp (the default) or udp`},
		{"upper case protocol", func(td *pborch.TaskDefinition) { td.Ports[1].Protocol = "TCP" },
			`data.ports[1].protocol: "TCP" is not a protocol`},
		{"container port twice", func(td *pborch.TaskDefinition) { td.Ports[1].ContainerPort = 8080 },
			`data.ports[1].container_port: 8080/tcp is also published by ports[0]`},
		{"container port twice, protocol defaulted", func(td *pborch.TaskDefinition) {
			td.Ports = append(td.Ports, &pborch.PortMapping{Name: "again", ContainerPort: 9100, Protocol: ""})
		}, `data.ports[2].container_port: 9100/tcp is also published by ports[1]`},
		{"fixed host port twice", func(td *pborch.TaskDefinition) { td.Ports[1].HostPort = 80 },
			`data.ports[1].host_port: 80/tcp is also the host port of ports[0]`},
		{"too many ports", func(td *pborch.TaskDefinition) {
			td.Ports = nil
			for i := range orchestrator.MaxPorts + 1 {
				td.Ports = append(td.Ports, &pborch.PortMapping{Name: "p" + strconv.Itoa(i), ContainerPort: uint32(1000 + i)})
			}
		}, `data.ports: has 65 ports, over the limit of 64`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			td := bridgeDefinition()
			c.edit(td)
			// Through the Validate hook, as the store calls it (and without
			// the Mutate hook first, as a client checking a file does).
			if _, err := validated(t, td); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, c.want)
			}
			if err := orchestrator.ValidateContainers(td); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("unmutated: got %v\nwant an error containing %q", err, c.want)
			}
		})
	}
}

func TestFixedHostPorts(t *testing.T) {
	td := bridgeDefinition()
	td.Ports = append(td.Ports,
		&pborch.PortMapping{Name: "dns", ContainerPort: 53, HostPort: 53, Protocol: "udp"},
		&pborch.PortMapping{Name: "dns-tcp", ContainerPort: 53, HostPort: 53})
	got := orchestrator.FixedHostPorts(td)
	want := []orchestrator.HostPort{{Port: 53, Protocol: "tcp"}, {Port: 53, Protocol: "udp"}, {Port: 80, Protocol: "tcp"}}
	if !slices.Equal(got, want) {
		t.Fatalf("FixedHostPorts = %v, want %v", got, want)
	}
	if s := want[1].String(); s != "53/udp" {
		t.Fatalf("String = %q", s)
	}
	// A definition that is not bridge publishes nothing, whatever it says.
	td.Network = "host"
	if got := orchestrator.FixedHostPorts(td); got != nil {
		t.Fatalf("a host task's fixed host ports: %v", got)
	}
}
