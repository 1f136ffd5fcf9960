package proxycomp

import (
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/mesh"
	"trellis.dev/trellis/internal/orchestrator"
)

func TestConcerns(t *testing.T) {
	res := func(id *pbresource.ID, msg *pbcatalog.ServiceInstance) *controller.Object {
		r := &pbresource.Resource{Id: id}
		if msg != nil {
			a, err := anypb.New(msg)
			if err != nil {
				t.Fatal(err)
			}
			r.Data = a
		}
		return &controller.Object{Resource: r}
	}
	instance := func(ns, name, svc string) *controller.Object {
		return res(catalog.ServiceInstanceID(ns, name), &pbcatalog.ServiceInstance{Service: svc})
	}
	added := func(o *controller.Object) informer.Delta { return informer.Delta{Op: informer.Added, New: o} }
	task := func(m *pborch.TaskMesh) interest {
		return interestOf(component.Task{ID: orchestrator.TaskID("prod", "dash-1"), Definition: &pborch.TaskDefinition{Family: "dash", Mesh: m}})
	}
	explicit := task(&pborch.TaskMesh{Port: 1, Upstreams: []*pborch.MeshUpstream{
		{Service: "counting", LocalPort: 5000}, {Service: "api", Namespace: "staging", LocalPort: 5001}}})
	transparent := task(&pborch.TaskMesh{Port: 1, Transparent: true})
	for _, tc := range []struct {
		name                  string
		d                     informer.Delta
		explicit, transparent bool
	}{
		{"an upstream's instance", added(instance("prod", "c-1", "counting")), true, true},
		{"an upstream's instance in another namespace", added(instance("staging", "a-1", "api")), true, true},
		{"an instance of a service of that name in another namespace", added(instance("other", "c-1", "counting")), false, true},
		{"an instance of its own service", added(instance("prod", "dash-2", "dash")), false, true},
		{"an instance moved to an upstream", informer.Delta{Op: informer.Changed, Old: instance("prod", "x-1", "other"), New: instance("prod", "x-1", "counting")}, true, true},
		{"an upstream's instance removed", informer.Delta{Op: informer.Removed, Old: instance("prod", "c-1", "counting")}, true, true},
		{"its own Service", added(res(catalog.ServiceID("prod", "dash"), nil)), true, true},
		{"an upstream's Service", added(res(catalog.ServiceID("prod", "counting"), nil)), true, true},
		{"another Service", added(res(catalog.ServiceID("prod", "other"), nil)), false, true},
		{"its own intentions", added(res(mesh.IntentionsID("prod", "dash"), nil)), true, true},
		{"an upstream's intentions", added(res(mesh.IntentionsID("prod", "counting"), nil)), false, false},
		{"the mesh's configuration", added(res(mesh.MeshConfigID(), nil)), true, true},
		{"a root", added(res(ca.RootID("r1"), nil)), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := changeOf(tc.d)
			if got := explicit.concerns(ch); got != tc.explicit {
				t.Errorf("explicit upstreams: %v, want %v", got, tc.explicit)
			}
			if got := transparent.concerns(ch); got != tc.transparent {
				t.Errorf("transparent: %v, want %v", got, tc.transparent)
			}
		})
	}
}
