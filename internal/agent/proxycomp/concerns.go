package proxycomp

import (
	"cmp"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// A change of a followed type is computed again only into the snapshots
// it can change: those of the tasks whose inputs it is.

// changeKind is what a change is of.
type changeKind int

const (
	changeOfAll        changeKind = iota // MeshConfig, a root: every snapshot
	changeOfInstances                    // a service's instances: its callers'
	changeOfService                      // a Service: its own tasks' and its callers'
	changeOfIntentions                   // a destination's intentions: its own tasks'
)

// change is one change of a followed type: its kind and the services
// (namespace/name) it concerns.
type change struct {
	kind     changeKind
	services []string
}

// changeOf says what delta d concerns. An instance moved from one service
// to another concerns both.
func changeOf(d informer.Delta) change {
	id := d.Resource().GetId()
	switch typ := id.GetType(); {
	case ids.SameType(typ, catalog.ServiceInstanceType):
		ch := change{kind: changeOfInstances}
		for _, o := range []*pbresource.Resource{oldOf(d), newOf(d)} {
			if si, err := resource.DecodeData[*pbcatalog.ServiceInstance](o); o != nil && err == nil {
				ch.services = append(ch.services, serviceKey(namespaceOf(o.GetId()), si.GetService()))
			}
		}
		return ch
	case ids.SameType(typ, catalog.ServiceType):
		return change{kind: changeOfService, services: []string{serviceKey(namespaceOf(id), id.GetName())}}
	case ids.SameType(typ, mesh.IntentionsType):
		return change{kind: changeOfIntentions, services: []string{serviceKey(namespaceOf(id), id.GetName())}}
	}
	return change{kind: changeOfAll}
}

func oldOf(d informer.Delta) *pbresource.Resource {
	if d.Old == nil {
		return nil
	}
	return d.Old.Resource
}

func newOf(d informer.Delta) *pbresource.Resource {
	if d.New == nil {
		return nil
	}
	return d.New.Resource
}

// interest is what a task's snapshot is made of: its own service, its
// upstreams, and every service when it is transparent.
type interest struct {
	self        string
	upstreams   map[string]bool
	transparent bool
}

func interestOf(t component.Task) interest {
	m := t.Definition.GetMesh()
	ns := namespaceOf(t.ID)
	in := interest{
		self:        serviceKey(ns, orchestrator.MeshService(t.Definition)),
		upstreams:   map[string]bool{},
		transparent: m.GetTransparent(),
	}
	for _, u := range m.GetUpstreams() {
		in.upstreams[serviceKey(cmp.Or(u.GetNamespace(), ns), u.GetService())] = true
	}
	return in
}

// concerns says whether ch can change the snapshot of a task of interest
// in.
func (in interest) concerns(ch change) bool {
	if ch.kind == changeOfAll {
		return true
	}
	for _, s := range ch.services {
		switch ch.kind {
		case changeOfInstances:
			if in.transparent || in.upstreams[s] {
				return true
			}
		case changeOfService:
			if in.transparent || in.upstreams[s] || s == in.self {
				return true
			}
		case changeOfIntentions:
			if s == in.self {
				return true
			}
		}
	}
	return false
}

func serviceKey(ns, name string) string { return ns + "/" + name }

func namespaceOf(id *pbresource.ID) string {
	return cmp.Or(id.GetTenancy().GetNamespace(), resource.DefaultNamespace)
}
