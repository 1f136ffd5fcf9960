package catalog_test

import (
	"slices"
	"testing"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
)

// The cache files each instance under its namespace and service, and
// takes it out when it is deleted.
func TestInstancesByService(t *testing.T) {
	w := newWorld(t)
	c := controller.NewCache(controller.CheckReadOnly())
	if err := c.Declare(catalog.InstancesCached...); err != nil {
		t.Fatal(err)
	}
	ns, err := core.NewNamespace("team", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.api.Write(w.ctx, &pbresource.WriteRequest{Resource: ns}); err != nil {
		t.Fatal(err)
	}
	stored := map[string]*pbresource.Resource{}
	add := func(ns, name, service string) {
		t.Helper()
		si := okExternal()
		si.Service = service
		res, err := w.write(catalog.ServiceInstanceID(ns, name), nil, si)
		if err != nil {
			t.Fatal(err)
		}
		stored[ns+"/"+name] = res
		c.Apply(controller.Event{Resource: res})
	}
	filed := func(ns, service string) []string {
		var names []string
		for _, o := range catalog.InstancesOf(c, ns, service) {
			names = append(names, o.Resource.GetId().GetName())
		}
		slices.Sort(names)
		return names
	}
	add("default", "web-1", "web")
	add("default", "web-2", "web")
	add("default", "api-1", "api")
	add("team", "web-1", "web")
	for _, tc := range []struct {
		ns, service string
		want        []string
	}{
		{"default", "web", []string{"web-1", "web-2"}},
		{"default", "api", []string{"api-1"}},
		{"team", "web", []string{"web-1"}},
		{"team", "api", nil},
	} {
		if got := filed(tc.ns, tc.service); !slices.Equal(got, tc.want) {
			t.Errorf("instances of %s/%s: %v, want %v", tc.ns, tc.service, got, tc.want)
		}
	}
	// An update keeps it filed once; a delete takes it out.
	si := okExternal()
	si.Service, si.Port = "web", 5433
	res, err := w.write(catalog.ServiceInstanceID("default", "web-2"), nil, si)
	if err != nil {
		t.Fatal(err)
	}
	c.Apply(controller.Event{Resource: res})
	if got := filed("default", "web"); !slices.Equal(got, []string{"web-1", "web-2"}) {
		t.Fatalf("after an update: %v", got)
	}
	if _, err := w.api.Delete(w.ctx, &pbresource.DeleteRequest{Id: res.GetId()}); err != nil {
		t.Fatal(err)
	}
	c.Apply(controller.Event{Resource: res, Deleted: true})
	if got := filed("default", "web"); !slices.Equal(got, []string{"web-1"}) {
		t.Fatalf("after a delete: %v", got)
	}
	if got, _ := controller.Decoded[*pbcatalog.ServiceInstance](catalog.InstancesOf(c, "team", "web")[0]); got.GetService() != "web" {
		t.Fatalf("the filed object: %v", got)
	}
	if err := c.Verify(); err != nil {
		t.Fatal(err)
	}
}

// The cache files an instance of a task under the Instance it runs on;
// one from outside Trellis runs on none and is filed nowhere.
func TestInstancesByInstance(t *testing.T) {
	w := newWorld(t)
	c := controller.NewCache(controller.CheckReadOnly())
	if err := c.Declare(catalog.HealthCached...); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ task, on string }{{"t1", "i-1"}, {"t2", "i-1"}, {"t3", "i-2"}} {
		task := w.task(tc.task, tc.on)
		si := okInstance()
		si.Instance, si.Task, si.Checks = tc.on, tc.task, nil
		res, err := w.write(catalog.ServiceInstanceID("default", tc.task), task, si)
		if err != nil {
			t.Fatal(err)
		}
		c.Apply(controller.Event{Resource: res})
	}
	ext, err := w.write(catalog.ServiceInstanceID("default", "db-1"), nil, okExternal())
	if err != nil {
		t.Fatal(err)
	}
	c.Apply(controller.Event{Resource: ext})
	on := func(instance string) []string {
		var names []string
		for _, o := range catalog.InstancesOn(c, instance) {
			names = append(names, o.Resource.GetId().GetName())
		}
		slices.Sort(names)
		return names
	}
	if got := on("i-1"); !slices.Equal(got, []string{"t1", "t2"}) {
		t.Errorf("on i-1: %v", got)
	}
	if got := on("i-2"); !slices.Equal(got, []string{"t3"}) {
		t.Errorf("on i-2: %v", got)
	}
	if got := on(""); got != nil {
		t.Errorf("filed under no instance: %v", got)
	}
}
