package command

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbmesh "trellis.dev/trellis/api/mesh/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/resource"
)

// The mesh's reads, through the HTTP API's generic resource face, and its
// writes, through the mesh's operations (mesh.IntentionsPath).

var (
	intentionsWire = wire.Type{Group: mesh.Group, GroupVersion: mesh.GroupVersion, Kind: "Intentions"}
	meshConfigWire = wire.Type{Group: mesh.Group, GroupVersion: mesh.GroupVersion, Kind: "MeshConfig"}
	serviceWire    = wire.Type{Group: "catalog", GroupVersion: "v1", Kind: "Service"}
)

// readProtocol reads the protocol of a destination from its catalog
// Service; "" when the catalog has no such service (or the server no
// catalog).
func readProtocol(ctx context.Context, c *client.Client, ns, dest string) (string, error) {
	r, err := c.Read(ctx, client.Ref{Type: serviceWire, Namespace: ns, Name: dest}, false)
	switch {
	case client.IsCode(err, wire.CodeNotFound):
		return "", nil
	case client.IsCode(err, wire.CodeInvalidArgument) && strings.Contains(err.Error(), "unknown resource type"):
		return "", nil
	case err != nil:
		return "", err
	}
	var svc pbcatalog.Service
	if err := cli.DecodeData(r, &svc); err != nil {
		return "", err
	}
	if svc.GetProtocol() == "" {
		return "tcp", nil // the catalog's default
	}
	return svc.GetProtocol(), nil
}

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

// updateIntentions applies edit to the Intentions of a destination (a new
// one when it has none) and writes it through the mesh's operations
// (PUT /v1/intentions/{destination}): a compare-and-swap on the version
// read, reading again and retrying when someone wrote in between. The
// servers check there that every source namespace exists and that a
// destination given L7 permissions speaks HTTP. An edit that leaves no
// source deletes the resource (DELETE, a compare-and-swap too).
func updateIntentions(ctx context.Context, c *client.Client, ns, dest string, edit func(in *pbmesh.Intentions) error) error {
	path := mesh.IntentionsPath + "/" + url.PathEscape(dest)
	for attempt := 0; ; attempt++ {
		r, in, err := readIntentions(ctx, c, ns, dest)
		if err != nil {
			return err
		}
		version := resource.CreateOnly
		if r != nil {
			version = r.Version
		} else {
			in = &pbmesh.Intentions{}
		}
		if err := edit(in); err != nil {
			return err
		}
		if len(in.GetSources()) == 0 {
			err = c.Do(ctx, http.MethodDelete, c.URL(path, url.Values{"namespace": {ns}, "version": {version}}), nil, nil)
		} else {
			var data []byte
			if data, err = cli.EncodeData(in); err != nil {
				return err
			}
			err = c.Do(ctx, http.MethodPut, c.URL(path, url.Values{"namespace": {ns}}), wire.WriteRequest{Data: data, Version: version}, nil)
		}
		if err == nil {
			return nil
		}
		if !client.IsCode(err, wire.CodeConflict) || attempt == 9 {
			return err
		}
	}
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
