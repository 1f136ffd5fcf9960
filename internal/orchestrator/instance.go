package orchestrator

import (
	"unicode/utf8"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// DefaultCluster is the cluster of an instance that names none.
const DefaultCluster = "default"

// Limits of instance attributes.
const (
	MaxAttributes           = 128
	MaxAttributeKeyLength   = 128
	MaxAttributeValueLength = 1024
)

// MutateInstance fills the defaults: the default cluster, and a status
// that follows from drain when none is given.
func MutateInstance(res *pbresource.Resource) error {
	return resource.MutateData(res, func(in *pborch.Instance) {
		if in.Cluster == "" {
			in.Cluster = DefaultCluster
		}
		if in.Status == "" {
			in.Status = InstanceStatus(false, false, in.Drain)
		}
	})
}

// ValidateInstance is the Validate hook of orchestrator/v1/Instance.
func ValidateInstance(res *pbresource.Resource) error {
	in, err := resource.DecodeData[*pborch.Instance](res)
	if err != nil {
		return err
	}
	if err := resource.ValidateName("data.cluster", in.GetCluster()); err != nil {
		return err
	}
	if in.GetSession() != "" {
		// The session is the agent's proof (SessionHolds): no write of
		// the data sets it, whether it creates the Instance or not.
		return resource.NewFieldError("data.session", "is the agent's registration, kept in status[%q] and written by the instance's agent through AgentService.Register; a write of the Instance cannot set it", AgentStatusKey)
	}
	switch in.GetStatus() {
	case InstanceReady, InstanceDraining, InstanceDown, InstanceLeft:
	default:
		return resource.NewFieldError("data.status", "%q is not a status: one of ready, draining, down, left", in.GetStatus())
	}
	if in.GetStatus() == InstanceReady && in.GetDrain() {
		return resource.NewFieldError("data.status", "cannot be ready while drain is set: it is draining")
	}
	if len(in.GetAttributes()) > MaxAttributes {
		return resource.NewFieldError("data.attributes", "has %d attributes, over the limit of %d", len(in.GetAttributes()), MaxAttributes)
	}
	for k, v := range in.GetAttributes() {
		if err := ValidateAttributeKey("data.attributes", k); err != nil {
			return err
		}
		if utf8.RuneCountInString(v) > MaxAttributeValueLength {
			return resource.NewFieldError("data.attributes["+k+"]", "is over the limit of %d characters", MaxAttributeValueLength)
		}
	}
	if r := in.GetResources(); r.GetCpuMillis() < 0 || r.GetMemoryBytes() < 0 {
		return resource.NewFieldError("data.resources", "cannot be negative")
	}
	return nil
}

// ValidateAttributeKey checks an attribute key: 1 to 128 characters of
// letters, digits, '.', '-', '_' and '/', starting with a letter or digit
// (so "zone", "node.class", "example.com/rack").
func ValidateAttributeKey(field, k string) error {
	if k == "" {
		return resource.NewFieldError(field, "an attribute key cannot be empty")
	}
	if len(k) > MaxAttributeKeyLength {
		return resource.NewFieldError(field+"["+k+"]", "the key is over the limit of %d characters", MaxAttributeKeyLength)
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || i > 0 && (c == '.' || c == '-' || c == '_' || c == '/') {
			continue
		}
		return resource.NewFieldError(field+"["+k+"]", "%q is not a valid attribute key: letters, digits, '.', '-', '_' and '/', starting with a letter or digit", k)
	}
	return nil
}

// SessionHolds reports whether session proves its bearer the agent of
// the Instance in: it is the session the agent registered last, and not
// empty. in must be the merged Instance (InstanceOf), whose session is
// its registration's.
func SessionHolds(in *pborch.Instance, session string) bool {
	return session != "" && in.GetSession() == session
}
