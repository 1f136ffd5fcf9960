package core

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// DefaultNamespaceDescription is the description Bootstrap gives "default".
const DefaultNamespaceDescription = "The namespace of resources that name none."

// Bootstrap makes sure the cluster's identity (the Cluster resource and
// its id) and the default Namespace are stored. The server calls it on
// gaining leadership; it is idempotent, never replaces the cluster id once
// one is stored, and leaves an existing default Namespace (and its
// description) as it is. ctx must carry whatever identity the service's
// authorizer needs to write cluster-scoped types.
func Bootstrap(ctx context.Context, api resource.API) error {
	if err := ensureCluster(ctx, api); err != nil {
		return err
	}
	_, err := api.Read(ctx, &pbresource.ReadRequest{Id: NamespaceID(DefaultNamespace), Consistent: true})
	if err == nil {
		return nil
	}
	if status.Code(err) != codes.NotFound {
		return fmt.Errorf("bootstrap: read the default namespace: %w", err)
	}
	res, err := NewNamespace(DefaultNamespace, DefaultNamespaceDescription)
	if err != nil {
		return err
	}
	// An upsert: should another writer create "default" between the read
	// and this write, its description is replaced, which is harmless.
	if _, err := api.Write(ctx, &pbresource.WriteRequest{Resource: res}); err != nil {
		return fmt.Errorf("bootstrap: write the default namespace: %w", err)
	}
	return nil
}
