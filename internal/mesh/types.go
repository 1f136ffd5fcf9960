package mesh

import (
	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// Group and GroupVersion of the mesh's types.
const (
	Group        = "mesh"
	GroupVersion = "v1"
)

// The mesh's resource types. See api/mesh/v1/mesh.proto for their fields.
var (
	// IntentionsType is mesh/v1/Intentions: namespaced, one per
	// destination service, named after it.
	IntentionsType = &pbresource.Type{Group: Group, GroupVersion: GroupVersion, Kind: "Intentions"}
	// MeshConfigType is mesh/v1/MeshConfig: cluster-scoped, one resource,
	// MeshConfigName.
	MeshConfigType = &pbresource.Type{Group: Group, GroupVersion: GroupVersion, Kind: "MeshConfig"}
)

// MeshConfigName is the name of the one MeshConfig.
const MeshConfigName = "default"

// Wildcard matches every service, or every namespace, in a source (and in
// Decide's destinations).
const Wildcard = "*"

// Action is what an intention does to a caller.
type Action string

// The two actions.
const (
	Allow Action = "allow"
	Deny  Action = "deny"
)

// The mTLS modes of MeshConfig.
const (
	MTLSStrict     = "strict"
	MTLSPermissive = "permissive"
)

// DefaultOutboundPort is the transparent proxy's outbound listener (the
// seed's 15001) when MeshConfig names none.
const DefaultOutboundPort = 15001

// IntentionsID returns the id of the Intentions of the destination
// service dest in namespace ns ("" is the default namespace).
func IntentionsID(ns, dest string) *pbresource.ID {
	if ns == "" {
		ns = resource.DefaultNamespace
	}
	return &pbresource.ID{Type: IntentionsType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: dest}
}

// MeshConfigID returns the id of the MeshConfig.
func MeshConfigID() *pbresource.ID {
	return &pbresource.ID{Type: MeshConfigType, Tenancy: &pbresource.Tenancy{}, Name: MeshConfigName}
}

// IntentionsPath is where the operations that write and delete
// Intentions are served: PUT and DELETE IntentionsPath/{destination}.
const IntentionsPath = "/v1/intentions"

// SpeaksHTTP says whether a destination of the catalog's protocol
// ("tcp", "http", "grpc"; "" is tcp) can be given L7 permissions: a proxy
// sees HTTP requests only there.
func SpeaksHTTP(protocol string) bool { return protocol == "http" || protocol == "grpc" }

// Register registers the mesh's types.
//
// Intentions are written and deleted through their operations
// (IntentionsPath, served by meshmodule; trellis intention create|delete
// call them), which check what the type's hooks cannot see: that every
// source namespace exists, and that a destination given L7 permissions
// does not speak tcp by its catalog Service. The generic write refuses
// them, pointing there. MeshConfig is written through the generic API.
func Register(r *resource.Registry) {
	r.Register(resource.Registration{
		Type:           IntentionsType,
		Proto:          &pbmesh.Intentions{},
		Scope:          resource.ScopeNamespace,
		Mutate:         MutateIntentions,
		Validate:       ValidateIntentions,
		WrittenThrough: "PUT " + IntentionsPath + "/{destination} (trellis intention create)",
		DeletedThrough: "DELETE " + IntentionsPath + "/{destination} (trellis intention delete)",
	})
	r.Register(resource.Registration{
		Type:     MeshConfigType,
		Proto:    &pbmesh.MeshConfig{},
		Scope:    resource.ScopeCluster,
		Mutate:   MutateMeshConfig,
		Validate: ValidateMeshConfig,
		// The servers create it when it is missing (meshmodule): a
		// delete would only bring the defaults back, so it is refused.
		Permanent: true,
	})
}
