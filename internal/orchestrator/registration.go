package orchestrator

import (
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// AgentStatusKey is the status key under which an instance's agent
// registers (an AgentRegistration). Only that instance's agent writes
// it, through AgentService.Register: the Instance's data stays the
// operator's, so an agent restarting never moves the Instance's
// generation and a user's write never competes with the agent's.
const AgentStatusKey = "agent"

// Built-in attribute keys: the agent reports these of its host in its
// registration; they are never the operator's.
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

// RegistrationOf is the agent's registration in res's status["agent"];
// nil when there is none (a store written before the registration moved
// there keeps it in the data) or it cannot be read.
func RegistrationOf(res *pbresource.Resource) *pborch.AgentRegistration {
	st := res.GetStatus()[AgentStatusKey]
	if st.GetData() == nil {
		return nil
	}
	reg := &pborch.AgentRegistration{}
	if err := st.GetData().UnmarshalTo(reg); err != nil {
		return nil
	}
	return reg
}

// MergeRegistration is the Instance from its data (the operator's) and
// its agent's registration (nil: none, and then the data is the
// registration too, as stores written before status["agent"] hold it).
// The registration's fields are the agent's; attributes are the
// operator's but for built-in keys, with the agent's (built-in and its
// -attribute flags) over them, as a registration always set them; status
// is left when the agent left, left or down when the data says so (older
// agents and servers wrote those there), else as drain says (the
// servers' down verdict is merged after, MergeInstance). It is pure; it returns in
// itself when reg is nil, else a copy.
func MergeRegistration(in *pborch.Instance, reg *pborch.AgentRegistration) *pborch.Instance {
	if reg == nil {
		return in
	}
	out := proto.Clone(in).(*pborch.Instance)
	if out.Cluster == "" {
		out.Cluster = DefaultCluster
	}
	out.Session = reg.GetSession()
	out.RegisteredAt = reg.GetRegisteredAt()
	out.AgentVersion = reg.GetAgentVersion()
	out.Address = reg.GetAddress()
	out.Resources = reg.GetResources()
	out.Drivers = reg.GetDrivers()
	attrs := make(map[string]string, len(reg.GetAttributes())+len(in.GetAttributes()))
	for k, v := range in.GetAttributes() {
		if !BuiltinAttribute(k) { // an old store's built-ins are the agent's, and stale
			attrs[k] = v
		}
	}
	for k, v := range reg.GetAttributes() {
		attrs[k] = v
	}
	out.Attributes = attrs
	switch {
	case reg.GetLeft():
		out.Status = InstanceLeft
	case in.GetStatus() == InstanceLeft || in.GetStatus() == InstanceDown:
		// Said in the data: by older agents and servers, or a user;
		// Register clears it when the agent registers again.
	default:
		out.Status = InstanceStatus(false, false, in.GetDrain())
	}
	return out
}

// ValidateAgentRegistration is the Validate hook of an Instance's
// status["agent"].
func ValidateAgentRegistration(m proto.Message) error {
	r, ok := m.(*pborch.AgentRegistration)
	if !ok {
		return resource.NewFieldError("", "is not an AgentRegistration")
	}
	if r.GetSession() == "" {
		return resource.NewFieldError("session", "is required")
	}
	if len(r.GetSession()) > MaxStartedByLength {
		return resource.NewFieldError("session", "is over the limit of %d characters", MaxStartedByLength)
	}
	if r.GetRegisteredAt() == nil {
		return resource.NewFieldError("registered_at", "is required")
	}
	if len(r.GetAttributes()) > MaxAttributes {
		return resource.NewFieldError("attributes", "has %d attributes, over the limit of %d", len(r.GetAttributes()), MaxAttributes)
	}
	for k, v := range r.GetAttributes() {
		if err := ValidateAttributeKey("attributes", k); err != nil {
			return err
		}
		if utf8.RuneCountInString(v) > MaxAttributeValueLength {
			return resource.NewFieldError("attributes["+k+"]", "is over the limit of %d characters", MaxAttributeValueLength)
		}
	}
	if res := r.GetResources(); res.GetCpuMillis() < 0 || res.GetMemoryBytes() < 0 {
		return resource.NewFieldError("resources", "cannot be negative")
	}
	return nil
}

// instanceSelf is the instance a stored Instance is: its agent owns its
// status["agent"].
func instanceSelf(res *pbresource.Resource) (string, error) {
	return res.GetId().GetName(), nil
}

// WithoutRegistration is in without the fields a registration holds
// (stores written before status["agent"] kept them in the data): what
// Register writes back as the data once the registration is in status.
// It is pure.
func WithoutRegistration(in *pborch.Instance) *pborch.Instance {
	out := proto.Clone(in).(*pborch.Instance)
	out.Session, out.RegisteredAt, out.AgentVersion, out.Address = "", nil, "", ""
	out.Resources, out.Drivers = nil, nil
	for k := range out.Attributes {
		if BuiltinAttribute(k) {
			delete(out.Attributes, k)
		}
	}
	return out
}
