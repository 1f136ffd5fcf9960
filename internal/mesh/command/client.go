package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/resource"
)

// The mesh's reads and writes, through the HTTP API's generic resource
// face.

var (
	intentionsWire = wire.Type{Group: mesh.Group, GroupVersion: mesh.GroupVersion, Kind: "Intentions"}
	meshConfigWire = wire.Type{Group: mesh.Group, GroupVersion: mesh.GroupVersion, Kind: "MeshConfig"}
	namespaceWire  = wire.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}
)

// namespaceOr is ns, or the default namespace when ns is "".
func namespaceOr(ns string) string {
	if ns == "" {
		return resource.DefaultNamespace
	}
	return ns
}

// readIntentions reads the Intentions of a destination; nil (and no
// error) when it has none.
func readIntentions(ctx context.Context, c *client.Client, ns, dest string) (*wire.Resource, *pbmesh.Intentions, error) {
	r, err := c.Read(ctx, client.Ref{Type: intentionsWire, Namespace: ns, Name: dest}, true)
	if client.IsCode(err, wire.CodeNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var in pbmesh.Intentions
	if err := cli.DecodeData(r, &in); err != nil {
		return nil, nil, err
	}
	return r, &in, nil
}

// errUnchanged ends an update that has nothing to write.
var errUnchanged = errors.New("unchanged")

// updateIntentions applies edit to the Intentions of a destination (a new
// one when it has none) with a compare-and-swap, reading again and
// retrying when someone wrote in between. An edit that leaves no source
// deletes the resource. It returns what was stored, nil after a delete.
func updateIntentions(ctx context.Context, c *client.Client, ns, dest string, edit func(in *pbmesh.Intentions, exists bool) error) (*wire.Resource, error) {
	ref := client.Ref{Type: intentionsWire, Namespace: ns, Name: dest}
	for attempt := 0; ; attempt++ {
		r, in, err := readIntentions(ctx, c, ns, dest)
		if err != nil {
			return nil, err
		}
		version, metadata := resource.CreateOnly, map[string]string(nil)
		if r != nil {
			version, metadata = r.Version, r.Metadata
		} else {
			in = &pbmesh.Intentions{}
		}
		if err := edit(in, r != nil); err != nil {
			return nil, err
		}
		var out *wire.Resource
		if len(in.GetSources()) == 0 {
			err = c.Delete(ctx, ref, version)
		} else {
			var data []byte
			if data, err = cli.EncodeData(in); err != nil {
				return nil, err
			}
			out, err = c.Write(ctx, ref, wire.WriteRequest{Data: data, Metadata: metadata, Version: version})
		}
		if err == nil {
			return out, nil
		}
		if !client.IsCode(err, wire.CodeConflict) || attempt == 9 {
			return nil, err
		}
	}
}

// checkSourceNamespace refuses a source namespace that does not exist:
// the resource API checks the namespace a resource is written into, not
// the ones its data names.
func checkSourceNamespace(ctx context.Context, c *client.Client, ns string) error {
	if ns == mesh.Wildcard || ns == resource.DefaultNamespace {
		return nil
	}
	_, err := c.Read(ctx, client.Ref{Type: namespaceWire, Name: ns}, true)
	if client.IsCode(err, wire.CodeNotFound) {
		return fmt.Errorf("--source-namespace: namespace %q does not exist (trellis resource list core/v1/Namespace lists them)", ns)
	}
	return err
}

// readDefaultAction reads the mesh's default action. A cluster that has
// no MeshConfig yet (its leader makes one at once) is refused rather than
// guessed at.
func readDefaultAction(ctx context.Context, c *client.Client) (mesh.Action, error) {
	r, err := c.Read(ctx, client.Ref{Type: meshConfigWire, Name: mesh.MeshConfigName}, false)
	if client.IsCode(err, wire.CodeNotFound) {
		return "", errors.New("the cluster has no mesh/v1/MeshConfig yet, so its default action is unknown: the leader creates it when it starts; try again in a moment")
	}
	if err != nil {
		return "", err
	}
	var mc pbmesh.MeshConfig
	if err := cli.DecodeData(r, &mc); err != nil {
		return "", err
	}
	return mesh.DefaultActionOf(&mc), nil
}

// sourceIndex is the index of the source (ns, name) in in, -1 if absent.
func sourceIndex(in *pbmesh.Intentions, ns, name string) int {
	for i, s := range in.GetSources() {
		if s.GetName() == name && s.GetNamespace() == ns {
			return i
		}
	}
	return -1
}

// catalogServiceWire is the catalog's Service, whose protocol says
// whether a destination speaks HTTP.
var catalogServiceWire = wire.Type{Group: "catalog", GroupVersion: "v1", Kind: "Service"}

// checkL7Destination refuses L7 permissions for a destination whose
// catalog Service says protocol tcp: a proxy sees no HTTP requests there
// to evaluate them on. A destination not in the catalog (yet), or a
// server without the catalog, passes: the rule waits for the service.
func checkL7Destination(ctx context.Context, c *client.Client, ns, dest string) error {
	r, err := c.Read(ctx, client.Ref{Type: catalogServiceWire, Namespace: ns, Name: dest}, false)
	switch {
	case client.IsCode(err, wire.CodeNotFound):
		return nil
	case client.IsCode(err, wire.CodeInvalidArgument) && strings.Contains(err.Error(), "unknown resource type"):
		return nil
	case err != nil:
		return err
	}
	var svc struct {
		Protocol string `json:"protocol"`
	}
	if err := json.Unmarshal(r.Data, &svc); err != nil {
		return fmt.Errorf("%s: the server returned data this CLI cannot read: %w", cli.Describe(r), err)
	}
	if svc.Protocol == "" || strings.EqualFold(svc.Protocol, "tcp") { // tcp is the catalog's default
		return fmt.Errorf("-f: %s/%s speaks protocol tcp (its catalog/v1/Service says so): L7 permissions need a destination that speaks HTTP (protocol http or grpc); give --action allow|deny for a tcp service", ns, dest)
	}
	return nil
}

// intentionsOf compiles an Intentions resource as the API returned it.
func intentionsOf(r *wire.Resource) (mesh.Intentions, error) {
	var in pbmesh.Intentions
	if err := cli.DecodeData(r, &in); err != nil {
		return mesh.Intentions{}, err
	}
	out, err := mesh.Compile(mesh.Service{Namespace: namespaceOr(r.ID.Tenancy.Namespace), Name: r.ID.Name}, &in)
	if err != nil {
		return mesh.Intentions{}, fmt.Errorf("%s: the server holds intentions this CLI cannot read: %w", cli.Describe(r), err)
	}
	return out, nil
}
