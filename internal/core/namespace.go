package core

import (
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// NamespaceType is core/v1/Namespace. It is the same value as
// resource.NamespaceType, which the resource service uses to check tenancy.
var NamespaceType = resource.NamespaceType

// DefaultNamespace is the namespace that always exists.
const DefaultNamespace = resource.DefaultNamespace

// MaxDescriptionLength bounds a Namespace's description, in characters.
const MaxDescriptionLength = 1024

// Register registers the core types: Namespace and Cluster.
func Register(r *resource.Registry) {
	r.Register(resource.Registration{
		Type:     NamespaceType,
		Proto:    &pbcore.Namespace{},
		Scope:    resource.ScopeCluster,
		Validate: ValidateNamespace,
	})
	r.Register(clusterRegistration())
}

// ValidateNamespace is the Validate hook of core/v1/Namespace. The name is
// checked by the resource service, as for every type.
func ValidateNamespace(res *pbresource.Resource) error {
	ns, err := resource.DecodeData[*pbcore.Namespace](res)
	if err != nil {
		return err
	}
	// proto3 decoding has already refused invalid UTF-8.
	d := ns.GetDescription()
	if n := utf8.RuneCountInString(d); n > MaxDescriptionLength {
		return resource.NewFieldError("data.description", "is %d characters long, over the limit of %d", n, MaxDescriptionLength)
	}
	return nil
}

// NamespaceID returns the id of the Namespace called name.
func NamespaceID(name string) *pbresource.ID { return resource.NamespaceID(name) }

// NewNamespace returns a Namespace resource ready to write.
func NewNamespace(name, description string) (*pbresource.Resource, error) {
	data, err := anypb.New(&pbcore.Namespace{Description: description})
	if err != nil {
		return nil, err
	}
	return &pbresource.Resource{Id: NamespaceID(name), Data: data}, nil
}
