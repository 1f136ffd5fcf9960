package meshmodule

import (
	"context"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/resource"
)

// The operations through which alone Intentions are written and deleted
// (mesh.IntentionsPath): they check, besides the type's hooks, what only
// other resources can tell — that every source namespace exists, and that
// a destination given L7 permissions does not speak tcp according to its
// catalog Service — then write with the operations' mark, which the
// generic write lacks (so a write that skips these checks is refused).

// operations writes and deletes Intentions.
type operations struct {
	api resource.API
	reg *resource.Registry
}

// write stores in as the Intentions of the destination dest in namespace
// ns, compare-and-swap on version when it is given ("0": create only).
func (o operations) write(ctx context.Context, ns, dest string, in *pbmesh.Intentions, version string) (*pbresource.Resource, error) {
	if err := o.checkReferences(ctx, ns, dest, in); err != nil {
		return nil, err
	}
	data, err := anypb.New(in)
	if err != nil {
		return nil, err
	}
	out, err := o.api.Write(resource.FromOperations(ctx), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: mesh.IntentionsID(ns, dest), Data: data, Version: version}})
	if err != nil {
		return nil, err
	}
	return out.GetResource(), nil
}

// checkReferences refuses sources of namespaces that do not exist and L7
// permissions for a destination whose catalog Service speaks tcp. The
// type's hooks check the rest after it.
func (o operations) checkReferences(ctx context.Context, ns, dest string, in *pbmesh.Intentions) error {
	seen := map[string]bool{mesh.Wildcard: true, resource.DefaultNamespace: true, "": true}
	l7 := -1
	for i, s := range in.GetSources() {
		if l7 < 0 && len(s.GetPermissions()) > 0 {
			l7 = i
		}
		sns := s.GetNamespace()
		if seen[sns] || !resource.IsDNSLabel(sns) { // a bad name is the hooks' to refuse
			continue
		}
		_, err := o.api.Read(ctx, &pbresource.ReadRequest{Id: resource.NamespaceID(sns)})
		if status.Code(err) == codes.NotFound {
			return status.Errorf(codes.FailedPrecondition, "data.sources[%d].namespace: namespace %q does not exist: create it first (a source names a namespace that exists, or \"*\")", i, sns)
		}
		if err != nil {
			return err
		}
		seen[sns] = true
	}
	if l7 < 0 {
		return nil
	}
	if _, ok := o.reg.Resolve(catalog.ServiceType); !ok {
		return nil // a server without the catalog: no protocol to check
	}
	res, err := o.api.Read(ctx, &pbresource.ReadRequest{Id: catalog.ServiceID(ns, dest)})
	if status.Code(err) == codes.NotFound {
		return nil // not in the catalog yet: the rule waits for it
	}
	if err != nil {
		return err
	}
	svc, err := resource.DecodeData[*pbcatalog.Service](res.GetResource())
	if err != nil {
		return err
	}
	if !mesh.SpeaksHTTP(svc.GetProtocol()) {
		return status.Errorf(codes.FailedPrecondition, "data.sources[%d].permissions: %s/%s speaks protocol %s (its catalog/v1/Service says so): L7 permissions need a destination that speaks HTTP (protocol http or grpc); give the source an action instead", l7, ns, dest, svc.GetProtocol())
	}
	return nil
}

// remove deletes the Intentions of dest, compare-and-swap on version when
// it is given.
func (o operations) remove(ctx context.Context, ns, dest, version string) error {
	_, err := o.api.Delete(resource.FromOperations(ctx), &pbresource.DeleteRequest{Id: mesh.IntentionsID(ns, dest), Version: version})
	return err
}

// routes serves the operations over HTTP: PUT and DELETE
// /v1/intentions/{destination}?namespace=, each needing namespace:write.
// Reads go through the generic API.
func (o operations) routes() []httpapi.Route {
	const one = mesh.IntentionsPath + "/{destination}"
	return []httpapi.Route{
		{Pattern: "PUT " + one, Permission: acl.NamespaceWrite, Handler: o.put},
		{Pattern: "DELETE " + one, Permission: acl.NamespaceWrite, Handler: o.delete},
		{Pattern: one, Permission: acl.Public, Handler: httpapi.MethodNotAllowed("PUT, DELETE")},
	}
}

func (o operations) put(w http.ResponseWriter, r *http.Request) error {
	p, err := httpapi.Params(r, "namespace")
	if err != nil {
		return err
	}
	var body wire.WriteRequest
	if err := httpapi.DecodeJSON(r, &body); err != nil {
		return err
	}
	if body.Owner != nil || len(body.Metadata) > 0 {
		return httpapi.InputError("owner", "and metadata are not taken here: an Intentions has neither")
	}
	if len(body.Data) == 0 {
		return httpapi.InputError("data", "is required: the destination's sources")
	}
	var in pbmesh.Intentions
	if err := httpapi.UnmarshalProto(body.Data, &in, "data"); err != nil {
		return err
	}
	res, err := o.write(r.Context(), namespaceOr(p["namespace"]), r.PathValue("destination"), &in, body.Version)
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, httpapi.ToWire(o.reg, res))
	return nil
}

func (o operations) delete(w http.ResponseWriter, r *http.Request) error {
	p, err := httpapi.Params(r, "namespace", "version")
	if err != nil {
		return err
	}
	if err := o.remove(r.Context(), namespaceOr(p["namespace"]), r.PathValue("destination"), p["version"]); err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, struct{}{})
	return nil
}

func namespaceOr(ns string) string {
	if ns == "" {
		return resource.DefaultNamespace
	}
	return ns
}
