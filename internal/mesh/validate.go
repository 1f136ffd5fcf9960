package mesh

import (
	"fmt"
	"net/netip"
	"strings"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// The hooks of the mesh's types. Every refusal is a resource.FieldError
// naming the field under "data".

// MutateIntentions is the Mutate hook of Intentions: a source without a
// namespace gets the destination's, and methods are written in upper
// case, so that what is stored says exactly what is decided.
func MutateIntentions(res *pbresource.Resource) error {
	ns := namespaceOf(res.GetId())
	return resource.MutateData(res, func(in *pbmesh.Intentions) {
		for _, s := range in.GetSources() {
			if s.GetNamespace() == "" {
				s.Namespace = ns
			}
			for _, p := range s.GetPermissions() {
				if h := p.GetHttp(); h != nil {
					for i, m := range h.GetMethods() {
						h.Methods[i] = strings.ToUpper(m)
					}
				}
			}
		}
	})
}

// ValidateIntentions is the Validate hook of Intentions: Compile's checks
// of every source.
func ValidateIntentions(res *pbresource.Resource) error {
	in, err := resource.DecodeData[*pbmesh.Intentions](res)
	if err != nil {
		return err
	}
	_, err = Compile(Service{Namespace: namespaceOf(res.GetId()), Name: res.GetId().GetName()}, in)
	return prefixed("data", err)
}

// IntentionsOf compiles a stored Intentions resource.
func IntentionsOf(res *pbresource.Resource) (Intentions, error) {
	in, err := resource.DecodeData[*pbmesh.Intentions](res)
	if err != nil {
		return Intentions{}, err
	}
	return Compile(Service{Namespace: namespaceOf(res.GetId()), Name: res.GetId().GetName()}, in)
}

func namespaceOf(id *pbresource.ID) string {
	if ns := id.GetTenancy().GetNamespace(); ns != "" {
		return ns
	}
	return resource.DefaultNamespace
}

// FillMeshConfigDefaults fills in what c leaves unset: the default
// intention "allow", mTLS "strict", the outbound port 15001.
func FillMeshConfigDefaults(c *pbmesh.MeshConfig) {
	if c.GetDefaultIntention() == "" {
		c.DefaultIntention = string(Allow)
	}
	if c.GetMtlsMode() == "" {
		c.MtlsMode = MTLSStrict
	}
	if c.TransparentProxy == nil {
		c.TransparentProxy = &pbmesh.TransparentProxyDefaults{}
	}
	if c.TransparentProxy.GetOutboundPort() == 0 {
		c.TransparentProxy.OutboundPort = DefaultOutboundPort
	}
}

// MutateMeshConfig is the Mutate hook of MeshConfig: FillMeshConfigDefaults.
func MutateMeshConfig(res *pbresource.Resource) error {
	return resource.MutateData(res, FillMeshConfigDefaults)
}

// ValidateMeshConfig is the Validate hook of MeshConfig.
func ValidateMeshConfig(res *pbresource.Resource) error {
	if name := res.GetId().GetName(); name != MeshConfigName {
		return resource.NewFieldError("id.name", "must be %q: the mesh has one configuration (got %q)", MeshConfigName, name)
	}
	c, err := resource.DecodeData[*pbmesh.MeshConfig](res)
	if err != nil {
		return err
	}
	return prefixed("data", checkMeshConfig(c))
}

func checkMeshConfig(c *pbmesh.MeshConfig) error {
	if _, err := parseAction("default_intention", c.GetDefaultIntention()); err != nil {
		return err
	}
	switch c.GetMtlsMode() {
	case MTLSStrict, MTLSPermissive:
	default:
		return resource.NewFieldError("mtls_mode", "%q is not a mode: give %q or %q", c.GetMtlsMode(), MTLSStrict, MTLSPermissive)
	}
	tp := c.GetTransparentProxy()
	if p := tp.GetOutboundPort(); p == 0 || p > 65535 {
		return resource.NewFieldError("transparent_proxy.outbound_port", "%d is not a port (1-65535)", p)
	}
	for i, cidr := range tp.GetExcludeOutboundCidrs() {
		if _, err := netip.ParsePrefix(cidr); err != nil {
			return resource.NewFieldError(fmt.Sprintf("transparent_proxy.exclude_outbound_cidrs[%d]", i), "%q is not a CIDR (as 10.0.0.0/8 or fd00::/8)", cidr)
		}
	}
	for _, f := range []struct {
		name  string
		ports []uint32
	}{{"exclude_outbound_ports", tp.GetExcludeOutboundPorts()}, {"exclude_inbound_ports", tp.GetExcludeInboundPorts()}} {
		for i, p := range f.ports {
			if p == 0 || p > 65535 {
				return resource.NewFieldError(fmt.Sprintf("transparent_proxy.%s[%d]", f.name, i), "%d is not a port (1-65535)", p)
			}
		}
	}
	return nil
}

// DefaultActionOf is the default intention of a MeshConfig. A missing
// one, or one that says no action, gives Deny: a reader that cannot tell
// the mesh's default fails closed.
func DefaultActionOf(c *pbmesh.MeshConfig) Action {
	if a, err := parseAction("", c.GetDefaultIntention()); err == nil {
		return a
	}
	return Deny
}
