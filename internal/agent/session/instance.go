package session

import (
	"runtime"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// Built-in attribute keys: the agent sets these at every registration, and
// they are the only keys it ever removes (driver.* for drivers no longer
// available). Every other attribute belongs to the operator.
const (
	AttrOS          = "os"
	AttrArch        = "arch"
	AttrHostname    = "hostname"
	AttrCPUCount    = "cpu.count"
	AttrMemoryBytes = "memory.bytes"
	AttrKernel      = "kernel"
	// AttrDriverPrefix + name is set for each available driver, to its
	// detail (a version).
	AttrDriverPrefix = "driver."
	// AttrNetworkBridge is "true" when the instance runs bridge tasks.
	AttrNetworkBridge = orchestrator.AttrNetworkBridge
)

// BuiltinAttribute reports whether an attribute is one the agent sets
// itself from what it finds on its host (operators cannot set or remove
// those).
func BuiltinAttribute(k string) bool {
	switch k {
	case AttrOS, AttrArch, AttrHostname, AttrCPUCount, AttrMemoryBytes, AttrKernel, AttrNetworkBridge:
		return true
	}
	return strings.HasPrefix(k, AttrDriverPrefix)
}

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

// registration is what the agent writes into its Instance.
type registration struct {
	cluster    string
	address    string
	session    string
	version    string
	facts      Facts
	attributes map[string]string // the operator's, from the flags
}

// mergeInstance is the Instance the agent registers, given what is stored
// (nil when none is): the built-in attributes and those of the flags over
// the stored ones, built-in keys the host no longer has removed, and the
// drain flag (and every other attribute) kept as the operator left them.
func mergeInstance(stored *pborch.Instance, r registration, registeredAt time.Time) *pborch.Instance {
	in := &pborch.Instance{
		RegisteredAt: timestamppb.New(registeredAt),
		DownSince:    stored.GetDownSince(), // the servers' to say
	}
	attrs := make(map[string]string)
	for k, v := range stored.GetAttributes() {
		if !BuiltinAttribute(k) {
			attrs[k] = v
		}
	}
	for k, v := range r.attributes {
		attrs[k] = v
	}
	for k, v := range r.facts.attributes() {
		attrs[k] = v
	}
	in.Cluster = r.cluster
	in.Address = r.address
	in.Attributes = attrs
	in.Drain = stored.GetDrain()
	in.Status = orchestrator.InstanceStatus(false, false, in.Drain)
	in.Session = r.session
	in.AgentVersion = r.version
	in.Resources = &pborch.Resources{CpuMillis: int64(r.facts.CPUs) * 1000, MemoryBytes: r.facts.MemoryBytes}
	in.Drivers = r.facts.Drivers
	return in
}
