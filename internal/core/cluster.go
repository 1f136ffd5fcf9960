package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/resource"
)

// ClusterType is core/v1/Cluster: the cluster's identity, one resource
// named ClusterName.
var ClusterType = &pbresource.Type{Group: "core", GroupVersion: "v1", Kind: "Cluster"}

// ClusterName is the name of the one Cluster resource.
const ClusterName = "default"

// ClusterResourceID returns the id of the Cluster resource.
func ClusterResourceID() *pbresource.ID {
	return &pbresource.ID{Type: ClusterType, Tenancy: &pbresource.Tenancy{}, Name: ClusterName}
}

// clusterRegistration: the cluster id is created once by Bootstrap and
// never changes, since the trust domain of every certificate the Connect
// CA signs is made of it. So the generic API never writes it (only
// Bootstrap does, FromOperations), the type is immutable, and the resource
// is permanent: deleting it would let the next leader mint another id. It
// is not secret: every certificate carries it, so any caller may read it.
func clusterRegistration() resource.Registration {
	anyone := func(acl.Authorizer, *pbresource.ID) error { return nil }
	return resource.Registration{
		Type:           ClusterType,
		Proto:          &pbcore.Cluster{},
		Scope:          resource.ScopeCluster,
		Validate:       ValidateCluster,
		Immutable:      true,
		Permanent:      true,
		WrittenThrough: "the server's bootstrap, once, at the cluster's first start",
		ACLs: &resource.ACLHooks{
			Read: anyone,
			List: func(acl.Authorizer, *pbresource.Tenancy) error { return nil },
		},
	}
}

// ValidateCluster is the Validate hook of core/v1/Cluster.
func ValidateCluster(res *pbresource.Resource) error {
	if name := res.GetId().GetName(); name != ClusterName {
		return resource.NewFieldError("id.name", "must be %q: a cluster has one identity (got %q)", ClusterName, name)
	}
	c, err := resource.DecodeData[*pbcore.Cluster](res)
	if err != nil {
		return err
	}
	if !IsUUID(c.GetId()) {
		return resource.NewFieldError("data.id", "%q is not a UUID: want 36 lowercase hex digits and hyphens, as 8-4-4-4-12", c.GetId())
	}
	return nil
}

// IsUUID reports whether s is a UUID in its canonical lowercase form.
func IsUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

// NewUUID returns a random (version 4) UUID from crypto/rand.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])  // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// NewCluster returns the Cluster resource with the given id, ready to
// write.
func NewCluster(id string) (*pbresource.Resource, error) {
	data, err := anypb.New(&pbcore.Cluster{Id: id})
	if err != nil {
		return nil, err
	}
	return &pbresource.Resource{Id: ClusterResourceID(), Data: data}, nil
}

// ensureCluster creates the Cluster resource with a fresh id unless one is
// stored. The write is create-only: two leaders in a row, or a leader whose
// first attempt's outcome was lost, never replace the id; a conflict means
// another made it, which is success.
func ensureCluster(ctx context.Context, api resource.API) error {
	_, err := api.Read(ctx, &pbresource.ReadRequest{Id: ClusterResourceID(), Consistent: true})
	if err == nil {
		return nil
	}
	if status.Code(err) != codes.NotFound {
		return fmt.Errorf("bootstrap: read the cluster id: %w", err)
	}
	res, err := NewCluster(NewUUID())
	if err != nil {
		return err
	}
	res.Version = resource.CreateOnly
	_, err = api.Write(resource.FromOperations(ctx), &pbresource.WriteRequest{Resource: res})
	if status.Code(err) == codes.Aborted {
		return nil
	}
	if err != nil {
		return fmt.Errorf("bootstrap: write the cluster id: %w", err)
	}
	return nil
}

// ClusterID returns the cluster's id, the uuid its first leader chose.
// Before that it fails with NotFound (retry: the bootstrap makes it).
func ClusterID(ctx context.Context, api resource.API) (string, error) {
	resp, err := api.Read(ctx, &pbresource.ReadRequest{Id: ClusterResourceID()})
	if err != nil {
		return "", fmt.Errorf("read the cluster id: %w", err)
	}
	c, err := resource.DecodeData[*pbcore.Cluster](resp.GetResource())
	if err != nil {
		return "", fmt.Errorf("decode the cluster id: %w", err)
	}
	return c.GetId(), nil
}
