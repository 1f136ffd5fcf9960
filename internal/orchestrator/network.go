package orchestrator

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/resource"
)

// Network modes of a task definition.
const (
	// NetworkHost: the task's containers share the instance's network
	// (an exec process) or have the engine's default (docker). The mode
	// of a definition that names none.
	NetworkHost = "host"
	// NetworkBridge: one network namespace for the task, shared by all its
	// containers, on the instance's bridge, publishing the task's ports.
	NetworkBridge = "bridge"
)

// Protocols of a published port.
const (
	ProtocolTCP = "tcp"
	ProtocolUDP = "udp"
)

// AttrNetworkBridge is the instance attribute the agent sets to "true"
// when it can run bridge tasks (the CNI plugins are there and work) and
// "false" when it cannot. The scheduler places a bridge task only where
// it is "true".
const AttrNetworkBridge = "network.bridge"

// MaxPorts bounds the ports one task publishes.
const MaxPorts = 64

// NetworkMode is a task definition's network mode: NetworkHost when it
// names none.
func NetworkMode(td *pborch.TaskDefinition) string {
	if td.GetNetwork() == "" {
		return NetworkHost
	}
	return td.GetNetwork()
}

// PortProtocol is a port mapping's protocol: ProtocolTCP when it names
// none.
func PortProtocol(p *pborch.PortMapping) string {
	if p.GetProtocol() == "" {
		return ProtocolTCP
	}
	return p.GetProtocol()
}

// HostPort is a port of an instance, with its protocol.
type HostPort struct {
	Port     uint32
	Protocol string
}

// String is the port as people write it: "8080/tcp".
func (p HostPort) String() string {
	return strconv.FormatUint(uint64(p.Port), 10) + "/" + p.Protocol
}

// FixedHostPorts are the host ports a task definition asks for by number
// (host_port 0 asks for any free one and is not among them), sorted. A
// definition that is not bridge publishes nothing.
func FixedHostPorts(td *pborch.TaskDefinition) []HostPort {
	if NetworkMode(td) != NetworkBridge {
		return nil
	}
	var out []HostPort
	for _, p := range td.GetPorts() {
		if p.GetHostPort() != 0 {
			out = append(out, HostPort{Port: p.GetHostPort(), Protocol: PortProtocol(p)})
		}
	}
	slices.SortFunc(out, func(a, b HostPort) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Protocol, b.Protocol))
	})
	return slices.Compact(out)
}

// mutateNetwork fills a port mapping's protocol (tcp), so that what is
// stored says what the agent publishes.
func mutateNetwork(td *pborch.TaskDefinition) {
	for _, p := range td.GetPorts() {
		if p.Protocol == "" {
			p.Protocol = ProtocolTCP
		}
	}
}

// validateNetwork checks a task definition's network and ports, and that
// a bridge task's containers do not list ports of their own (the task
// publishes them); fields are named from "data.".
func validateNetwork(td *pborch.TaskDefinition) error {
	mode := td.GetNetwork()
	switch mode {
	case "", NetworkHost, NetworkBridge:
	default:
		return resource.NewFieldError("data.network", "%q is not a network mode: %s (the default) or %s", mode, NetworkHost, NetworkBridge)
	}
	ports := td.GetPorts()
	if len(ports) > 0 && mode != NetworkBridge {
		return resource.NewFieldError("data.ports", "only with network %q: a task on the host's network listens on the host's ports itself (list them in its containers' ports)", NetworkBridge)
	}
	if mode == NetworkBridge {
		for i, c := range td.GetContainers() {
			if len(c.GetPorts()) > 0 {
				return resource.NewFieldError(fmt.Sprintf("data.containers[%d].ports", i), "a bridge task publishes its ports in the task's ports, not a container's: move them to ports (name, container_port, host_port)")
			}
		}
	}
	if len(ports) > MaxPorts {
		return resource.NewFieldError("data.ports", "has %d ports, over the limit of %d", len(ports), MaxPorts)
	}
	names := make(map[string]int, len(ports))
	inside := make(map[HostPort]int, len(ports))
	fixed := make(map[HostPort]int, len(ports))
	for i, p := range ports {
		field := fmt.Sprintf("data.ports[%d]", i)
		if err := resource.ValidateName(field+".name", p.GetName()); err != nil {
			return err
		}
		if j, dup := names[p.GetName()]; dup {
			return resource.NewFieldError(field+".name", "%q is also the name of ports[%d]", p.GetName(), j)
		}
		names[p.GetName()] = i
		proto := PortProtocol(p)
		if proto != ProtocolTCP && proto != ProtocolUDP {
			return resource.NewFieldError(field+".protocol", "%q is not a protocol: %s (the default) or %s", p.GetProtocol(), ProtocolTCP, ProtocolUDP)
		}
		if cp := p.GetContainerPort(); cp == 0 || cp > 65535 {
			return resource.NewFieldError(field+".container_port", "%d is out of range 1-65535", cp)
		}
		if hp := p.GetHostPort(); hp > 65535 {
			return resource.NewFieldError(field+".host_port", "%d is out of range 0-65535 (0: a free port the agent picks)", hp)
		}
		in := HostPort{Port: p.GetContainerPort(), Protocol: proto}
		if j, dup := inside[in]; dup {
			return resource.NewFieldError(field+".container_port", "%s is also published by ports[%d]: publish a container port once", in, j)
		}
		inside[in] = i
		if p.GetHostPort() != 0 {
			out := HostPort{Port: p.GetHostPort(), Protocol: proto}
			if j, dup := fixed[out]; dup {
				return resource.NewFieldError(field+".host_port", "%s is also the host port of ports[%d]", out, j)
			}
			fixed[out] = i
		}
	}
	return nil
}
