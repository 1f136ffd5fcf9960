package tasknet

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// CNIVersion is the CNI spec version of what the agent writes: the newest
// that Debian's plugins (1.1.1) speak.
const CNIVersion = "1.0.0"

// AdminChain is the firewall plugin's chain in the filter table where an
// operator adds rules of their own for the tasks' traffic; the plugin
// creates it and never flushes it.
const AdminChain = "TRELLIS-ADMIN"

// The conflist's plugins, as their JSON. Only what the agent sets is
// here; the plugins' own defaults hold for the rest.
type (
	conflist struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []any  `json:"plugins"`
	}
	bridgePlugin struct {
		Type string `json:"type"`
		// Bridge is created when missing, given the gateway address.
		Bridge string `json:"bridge"`
		// IsGateway: the bridge holds the subnet's gateway address and the
		// task's default route goes through it.
		IsGateway bool `json:"isGateway"`
		// IPMasq: the task's traffic to anywhere but the subnet is
		// masqueraded behind the host's address (outbound NAT).
		IPMasq bool `json:"ipMasq"`
		// HairpinMode lets a task reach its own published ports through
		// the host's address.
		HairpinMode bool      `json:"hairpinMode"`
		IPAM        hostLocal `json:"ipam"`
	}
	hostLocal struct {
		Type    string        `json:"type"`
		DataDir string        `json:"dataDir"`
		Ranges  [][]ipamRange `json:"ranges"`
		Routes  []ipamRoute   `json:"routes"`
	}
	ipamRange struct {
		Subnet     string `json:"subnet"`
		RangeStart string `json:"rangeStart,omitempty"`
		RangeEnd   string `json:"rangeEnd,omitempty"`
		Gateway    string `json:"gateway"`
	}
	ipamRoute struct {
		Dst string `json:"dst"`
	}
	firewallPlugin struct {
		Type       string `json:"type"`
		Backend    string `json:"backend"`
		AdminChain string `json:"iptablesAdminChainName"`
	}
	portmapPlugin struct {
		Type         string          `json:"type"`
		Capabilities map[string]bool `json:"capabilities"`
		// SNAT masquerades connections to a published port that come from
		// the host itself (127.0.0.1 included) or from the task itself,
		// so that the answers find their way back.
		SNAT bool `json:"snat"`
	}
	loopbackConf struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Type       string `json:"type"`
	}
)

// Conflist is the CNI network configuration list the agent writes and
// adds every bridge task's namespace to:
//
//   - bridge: a veth from the namespace to the host bridge, an address
//     from host-local IPAM (its leases in the agent's data dir), the
//     default route through the bridge, outbound NAT;
//   - firewall: accepts the task's forwarded traffic in the filter table
//     (FORWARD's policy is DROP where Docker runs), in chains of its own;
//   - portmap: the task's published ports (the portMappings capability:
//     RuntimeConfig), with SNAT for connections from the host.
//
// The namespace's loopback comes up through a second configuration,
// LoopbackConf, since the loopback plugin works on "lo" only.
func Conflist(c Config) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := ipamRange{Subnet: c.Subnet.String(), Gateway: c.Subnet.Addr().Next().String()}
	if c.RangeStart.IsValid() {
		r.RangeStart, r.RangeEnd = c.RangeStart.String(), c.RangeEnd.String()
	}
	l := conflist{
		CNIVersion: CNIVersion,
		Name:       NetworkName,
		Plugins: []any{
			bridgePlugin{
				Type: "bridge", Bridge: c.Bridge, IsGateway: true, IPMasq: true, HairpinMode: true,
				IPAM: hostLocal{
					Type:    "host-local",
					DataDir: c.ipamDir(),
					Ranges:  [][]ipamRange{{r}},
					Routes:  []ipamRoute{{Dst: "0.0.0.0/0"}},
				},
			},
			firewallPlugin{Type: "firewall", Backend: "iptables", AdminChain: AdminChain},
			portmapPlugin{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}, SNAT: true},
		},
	}
	return json.MarshalIndent(l, "", "  ")
}

// LoopbackConf is the configuration that brings the namespace's loopback
// up (with IfName "lo").
func LoopbackConf() []byte {
	b, _ := json.Marshal(loopbackConf{CNIVersion: CNIVersion, Name: NetworkName + "-lo", Type: "loopback"})
	return b
}

// Plugins are the plugin binaries the configurations name.
var Plugins = []string{"bridge", "host-local", "firewall", "portmap", "loopback"}

// Protocols of a published port.
const (
	TCP = "tcp"
	UDP = "udp"
)

// Port is one port of a task to publish on the host.
type Port struct {
	// Name names it in the task definition (for the metadata and the
	// catalog).
	Name string `json:"name,omitempty"`
	// ContainerPort is the port the task listens on in its namespace.
	ContainerPort int `json:"container_port"`
	// HostPort is the host's port; 0 asks the agent to pick a free one.
	HostPort int `json:"host_port"`
	// Protocol is "tcp" (the default, when empty) or "udp".
	Protocol string `json:"protocol"`
}

func (p Port) proto() string {
	if p.Protocol == "" {
		return TCP
	}
	return p.Protocol
}

// portName is a port's name in a definition: a DNS label, lower case.
var portName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// CheckPorts refuses ports that cannot be published, naming the field
// (ports[i].host_port, ...): out of range, a protocol that is neither tcp
// nor udp, a container port or a host port listed twice for one protocol,
// a name given twice.
func CheckPorts(ports []Port) error {
	type key struct {
		port  int
		proto string
	}
	containerPorts, hostPorts, names := map[key]int{}, map[key]int{}, map[string]int{}
	for i, p := range ports {
		f := fmt.Sprintf("ports[%d]", i)
		if p.Name != "" {
			if !portName.MatchString(p.Name) {
				return fmt.Errorf("%s.name: %q is not a name (lower-case letters, digits and '-', at most 63)", f, p.Name)
			}
			if j, dup := names[p.Name]; dup {
				return fmt.Errorf("%s.name: %q is also the name of ports[%d]", f, p.Name, j)
			}
			names[p.Name] = i
		}
		if p.Protocol != "" && p.Protocol != TCP && p.Protocol != UDP {
			return fmt.Errorf("%s.protocol: %q is neither tcp nor udp", f, p.Protocol)
		}
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			return fmt.Errorf("%s.container_port: %d is not a port: use 1 to 65535", f, p.ContainerPort)
		}
		if p.HostPort < 0 || p.HostPort > 65535 {
			return fmt.Errorf("%s.host_port: %d is not a port: use 1 to 65535, or 0 for one the agent picks", f, p.HostPort)
		}
		ck := key{p.ContainerPort, p.proto()}
		if j, dup := containerPorts[ck]; dup {
			return fmt.Errorf("%s.container_port: %d/%s is also ports[%d]'s", f, p.ContainerPort, p.proto(), j)
		}
		containerPorts[ck] = i
		if p.HostPort != 0 {
			hk := key{p.HostPort, p.proto()}
			if j, dup := hostPorts[hk]; dup {
				return fmt.Errorf("%s.host_port: %d/%s is also ports[%d]'s", f, p.HostPort, p.proto(), j)
			}
			hostPorts[hk] = i
		}
	}
	return nil
}

// portMapping is one entry of the portMappings capability, as the
// portmap plugin reads it.
type portMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
}

// capabilityArgs is the runtime configuration of a task's ADD and DEL:
// its published ports, every host port chosen. Nil without ports.
func capabilityArgs(ports []Port) (map[string]any, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	m := make([]portMapping, len(ports))
	for i, p := range ports {
		if p.HostPort == 0 {
			return nil, fmt.Errorf("ports[%d].host_port: not chosen yet", i)
		}
		m[i] = portMapping{HostPort: p.HostPort, ContainerPort: p.ContainerPort, Protocol: p.proto()}
	}
	return map[string]any{"portMappings": m}, nil
}

// containerID is what CNI calls the task: its uid, which names its
// namespace's mount point and its leases too.
var containerID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

func checkUID(uid string) error {
	if !containerID.MatchString(uid) {
		return fmt.Errorf("task uid %q cannot name a CNI container (letters, digits, '_', '.', '-')", uid)
	}
	return nil
}

// HostNet is an address or a route of the host, as CheckSubnet compares
// it with the task subnet.
type HostNet struct {
	Prefix netip.Prefix
	// Interface is the device it is on.
	Interface string
	// Route says it is a route's destination, not an address.
	Route bool
}

func (h HostNet) String() string {
	kind := "address"
	if h.Route {
		kind = "route to"
	}
	return fmt.Sprintf("%s %s on %s", kind, h.Prefix, h.Interface)
}

// CheckSubnet refuses a task subnet that overlaps an address or a route of
// the host, other than those on the task bridge itself (which are the
// subnet's own, from an earlier run): traffic to the tasks and to that
// network could not both be routed. Default routes (0.0.0.0/0) overlap
// everything and are not counted.
func CheckSubnet(c Config, host []HostNet) error {
	if err := checkSubnetValue(c.Subnet); err != nil {
		return err
	}
	var clash []string
	for _, h := range host {
		if h.Interface == c.Bridge || !h.Prefix.IsValid() || !h.Prefix.Addr().Is4() || (h.Route && h.Prefix.Bits() == 0) {
			continue
		}
		if h.Prefix.Masked().Overlaps(c.Subnet) {
			clash = append(clash, h.String())
		}
	}
	if len(clash) == 0 {
		return nil
	}
	slices.Sort(clash)
	clash = slices.Compact(clash)
	return fmt.Errorf("-bridge-subnet: %s overlaps the host's %s: choose another private subnet with -bridge-subnet", c.Subnet, strings.Join(clash, ", "))
}
