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

// Register registers the mesh's types. Both are written through the
// generic API (trellis intention writes Intentions through it); the
// checks a type's hooks cannot make alone (that a source namespace exists,
// that an L7 rule's destination speaks HTTP) are the CLI's, before it
// writes.
func Register(r *resource.Registry) {
	r.Register(resource.Registration{
		Type:     IntentionsType,
		Proto:    &pbmesh.Intentions{},
		Scope:    resource.ScopeNamespace,
		Mutate:   MutateIntentions,
		Validate: ValidateIntentions,
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
