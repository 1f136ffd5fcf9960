package session

import (
	"runtime"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// Built-in attribute keys: the agent reports these of its host at every
// registration (orchestrator's, where the merged Instance needs them).
// Every other attribute belongs to the operator.
const (
	AttrOS          = orchestrator.AttrOS
	AttrArch        = orchestrator.AttrArch
	AttrHostname    = orchestrator.AttrHostname
	AttrCPUCount    = orchestrator.AttrCPUCount
	AttrMemoryBytes = orchestrator.AttrMemoryBytes
	AttrKernel      = orchestrator.AttrKernel
	// AttrDriverPrefix + name is set for each available driver, to its
	// detail (a version).
	AttrDriverPrefix = orchestrator.AttrDriverPrefix
	// AttrNetworkBridge is "true" when the instance runs bridge tasks.
	AttrNetworkBridge = orchestrator.AttrNetworkBridge
)

// BuiltinAttribute reports whether an attribute is one the agent sets
// itself from what it finds on its host (operators cannot set or remove
// those).
func BuiltinAttribute(k string) bool { return orchestrator.BuiltinAttribute(k) }

// Facts are what the agent found out about its host: the Instance's
// built-in attributes, resources and drivers.
type Facts struct {
	Hostname    string
	CPUs        int
	MemoryBytes int64
	Kernel      string
	Drivers     []*pborch.DriverInfo
	// BridgeNetwork: tasks with network: bridge can run here (the CNI
	// plugins are there, the agent is root, the subnet is free).
	BridgeNetwork bool
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// attributes are the built-in attributes of f.
func (f Facts) attributes() map[string]string {
	a := map[string]string{
		AttrOS:       runtime.GOOS,
		AttrArch:     runtime.GOARCH,
		AttrCPUCount: strconv.Itoa(f.CPUs),
		// Always set, "false" too: a scheduler tells an instance that
		// cannot from one whose agent predates the attribute.
		AttrNetworkBridge: strconv.FormatBool(f.BridgeNetwork),
	}
	if f.Hostname != "" {
		a[AttrHostname] = truncate(f.Hostname, orchestrator.MaxAttributeValueLength)
	}
	if f.MemoryBytes > 0 {
		a[AttrMemoryBytes] = strconv.FormatInt(f.MemoryBytes, 10)
	}
	if f.Kernel != "" {
		a[AttrKernel] = f.Kernel
	}
	for _, d := range f.Drivers {
		if d.Available && orchestrator.ValidateAttributeKey("", AttrDriverPrefix+d.Name) == nil {
			a[AttrDriverPrefix+d.Name] = d.Detail
		}
	}
	return a
}

// registration is what the agent registers of its Instance.
type registration struct {
	cluster    string
	address    string
	session    string
	version    string
	facts      Facts
	attributes map[string]string // the operator's, from the flags
	left       bool
}

// registerRequest is the AgentService.Register call for r, registered at
// registeredAt: the built-in attributes over those of the flags. What the
// operator set (other attributes, drain) is in the Instance's data, which
// the server keeps as it is.
func registerRequest(instance string, r registration, registeredAt time.Time) *pbagent.RegisterRequest {
	attrs := make(map[string]string, len(r.attributes)+8)
	for k, v := range r.attributes {
		attrs[k] = v
	}
	for k, v := range r.facts.attributes() {
		attrs[k] = v
	}
	return &pbagent.RegisterRequest{
		Instance: instance,
		Cluster:  r.cluster,
		Registration: &pborch.AgentRegistration{
			Session:      r.session,
			RegisteredAt: timestamppb.New(registeredAt),
			AgentVersion: r.version,
			Address:      r.address,
			Resources:    &pborch.Resources{CpuMillis: int64(r.facts.CPUs) * 1000, MemoryBytes: r.facts.MemoryBytes},
			Drivers:      r.facts.Drivers,
			Attributes:   attrs,
			Left:         r.left,
		},
	}
}
