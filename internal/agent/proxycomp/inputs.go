package proxycomp

import (
	"cmp"
	"context"
	"crypto"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbmesh "trellis.dev/trellis/api/mesh/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/leaves"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/proxy/snapshot"
	"trellis.dev/trellis/internal/resource"
)

// errNotSynced: the informer has not listed every followed type yet.
var errNotSynced = errors.New("the agent's cache is not synced yet")

// gather reads the inputs of task t's snapshot from the informer and the
// leaf cache, waiting for the leaf while it is not signed (or ctx ends).
func gather(ctx context.Context, d component.Deps, t component.Task) (snapshot.Inputs, error) {
	inf := d.Informer
	for _, ct := range followed {
		if !inf.Synced(ct.Type) {
			return snapshot.Inputs{}, errNotSynced
		}
	}
	m := t.Definition.GetMesh()
	ns := cmp.Or(t.ID.GetTenancy().GetNamespace(), resource.DefaultNamespace)
	self := orchestrator.MeshService(t.Definition)
	in := snapshot.Inputs{
		Task: t.ID, Definition: t.Definition,
		Instance: d.Instance, Datacenter: d.Datacenter,
	}

	// The roots, and the trust domain of the active one.
	for _, o := range inf.List(ca.RootType) {
		r, err := resource.DecodeData[*pbca.CARoot](o.Resource)
		if err != nil {
			return snapshot.Inputs{}, fmt.Errorf("root %s: %w", o.Resource.GetId().GetName(), err)
		}
		in.Roots = append(in.Roots, []byte(r.GetRootCert()))
		if r.GetActive() {
			in.TrustDomain = r.GetTrustDomain()
		}
	}

	if o := inf.Get(mesh.MeshConfigID()); o != nil {
		c, err := resource.DecodeData[*pbmesh.MeshConfig](o.Resource)
		if err != nil {
			return snapshot.Inputs{}, fmt.Errorf("mesh config: %w", err)
		}
		in.MeshConfig = c
	}
	if o := inf.Get(mesh.IntentionsID(ns, self)); o != nil {
		it, err := resource.DecodeData[*pbmesh.Intentions](o.Resource)
		if err != nil {
			return snapshot.Inputs{}, fmt.Errorf("intentions of %s/%s: %w", ns, self, err)
		}
		in.Intentions = it
	}

	// The services: its own, its upstreams', and every service for a
	// transparent task.
	type ref struct{ ns, name string }
	refs := []ref{{ns, self}}
	for _, u := range m.GetUpstreams() {
		refs = append(refs, ref{cmp.Or(u.GetNamespace(), ns), u.GetService()})
	}
	if m.GetTransparent() {
		for _, o := range inf.List(catalog.ServiceType) {
			id := o.Resource.GetId()
			refs = append(refs, ref{cmp.Or(id.GetTenancy().GetNamespace(), resource.DefaultNamespace), id.GetName()})
		}
	}
	slices.SortFunc(refs, func(a, b ref) int { return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.name, b.name)) })
	refs = slices.Compact(refs)
	for _, r := range refs {
		if o := inf.Get(catalog.ServiceID(r.ns, r.name)); o != nil {
			in.Services = append(in.Services, o.Resource)
		}
		for _, o := range inf.ByIndex(catalog.ServiceInstanceType, catalog.InstancesByService.Name, catalog.ServiceKey(r.ns, r.name)) {
			in.Instances = append(in.Instances, o.Resource)
		}
	}

	if d.Leaves == nil {
		return snapshot.Inputs{}, errors.New("the agent runs without a leaf cache: no leaf for the proxy")
	}
	cert, _, err := d.Leaves.Get(ctx, leaves.ServiceKey(ns, self))
	if err != nil {
		return snapshot.Inputs{}, fmt.Errorf("leaf of %s/%s: %w", ns, self, err)
	}
	leaf, err := leafPEM(cert.Certificate, cert.PrivateKey)
	if err != nil {
		return snapshot.Inputs{}, fmt.Errorf("leaf of %s/%s: %w", ns, self, err)
	}
	in.Leaf = leaf
	return in, nil
}

// leafPEM encodes a leaf's chain (DER, the leaf first) and its key.
func leafPEM(chain [][]byte, key crypto.PrivateKey) (snapshot.Leaf, error) {
	signer, ok := key.(crypto.Signer)
	if !ok {
		return snapshot.Leaf{}, fmt.Errorf("its key is a %T, not a signer", key)
	}
	keyPEM, err := ca.EncodeKey(signer)
	if err != nil {
		return snapshot.Leaf{}, err
	}
	var certPEM []byte
	for _, der := range chain {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return snapshot.Leaf{CertPEM: certPEM, KeyPEM: keyPEM}, nil
}
