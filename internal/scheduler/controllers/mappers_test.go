package controllers_test

import (
	"slices"
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/scheduler/schedulertest"
)

// The mappers only map, from the event and the cache: an instance's
// change asks for every environment the cache holds, an environment's for
// itself, a task's for its owner; mapping changes nothing in the cache,
// and mapping again answers the same.
func TestMappersOnlyMap(t *testing.T) {
	h := schedulertest.New(t)
	h.Instance("i1", map[string]string{"role": "logger"})
	td := h.TaskDefinition("ls", 1)
	for _, name := range []string{"a", "b"} {
		if _, err := h.Ops.CreateEnvironment(h.Ctx, "default", schedulertest.Spec(name, h.TaskDefinition("ls-"+name, 1), 75, "", "role=logger")); err != nil {
			t.Fatal(err)
		}
	}
	h.NewTerm() // the environments listed into the cache, as a term's watches do
	revisions := func() []uint64 {
		var out []uint64
		for _, ct := range h.Ctl.Cached {
			out = append(out, h.Cache.Revision(ct.Type))
		}
		return out
	}
	env := h.EnvResource("a")
	instance, err := h.API.Read(h.Ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID("i1")})
	if err != nil {
		t.Fatal(err)
	}
	task := h.Write(orchestrator.TaskID("default", "t1"), h.EnvResource("b").GetId(), &pborch.Task{TaskDefinition: td, Instance: "i1", DesiredStatus: orchestrator.StatusRunning}, "")
	before := revisions()
	for _, tc := range []struct {
		what string
		got  func() []string
		want []string
	}{
		{"an instance", func() []string { return mapped(h, instance.GetResource()) }, []string{"a", "b"}},
		{"an environment", func() []string { return mapped(h, env) }, []string{"a"}},
		{"a task", func() []string { return mapped(h, task) }, []string{"b"}},
	} {
		first := tc.got()
		slices.Sort(first)
		if !slices.Equal(first, tc.want) {
			t.Errorf("%s maps to %v, want %v", tc.what, first, tc.want)
		}
		again := tc.got()
		slices.Sort(again)
		if !slices.Equal(first, again) {
			t.Errorf("%s maps to %v, then to %v", tc.what, first, again)
		}
	}
	if after := revisions(); !slices.Equal(before, after) {
		t.Fatalf("mapping changed the cache: revisions %v, then %v", before, after)
	}
}
