package controller_test

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	"pgregory.net/rapid"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
)

// modelEntry is what the model keeps of a cached resource.
type modelEntry struct {
	uid     string
	version uint64
	value   string
	owner   string // "" for none
}

// tagged is a Derived value: the object's value and version.
var tagged = &controller.Derived{Name: "tagged", Make: func(o *controller.Object) any {
	v, _ := controller.Decoded[*wrapperspb.StringValue](o)
	return v.GetValue() + "@" + o.Resource.GetVersion()
}}

// The cache, read between any two events, answers what a plain map
// following the same rules answers, each object with its derived value as
// of its version; its revision moves on every change it applies and on no
// event it ignores; and a slice it handed out never changes afterwards,
// whatever events follow.
func TestCacheMatchesAModel(t *testing.T) {
	owners := map[string]*pbresource.ID{"d1": id(deploymentType, "d1"), "d2": id(deploymentType, "d2")}
	rapid.Check(t, func(rt *rapid.T) {
		c := controller.NewCache(controller.CheckReadOnly())
		if err := c.Declare(controller.CachedType{Type: taskType, Indexes: []*controller.Index{byValue}, Derived: []*controller.Derived{tagged}}); err != nil {
			rt.Fatal(err)
		}
		model := map[string]modelEntry{}
		var clock uint64 = 1
		type handed struct {
			slice []*controller.Object
			names []string
		}
		var out []handed
		hand := func(s []*controller.Object) []string {
			n := names(s)
			out = append(out, handed{s, n})
			return n
		}
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for range steps {
			name := rapid.SampledFrom([]string{"a", "b", "c", "d", "e"}).Draw(rt, "name")
			uid := rapid.SampledFrom([]string{"u1", "u2"}).Draw(rt, "uid")
			clock++
			version := clock - uint64(rapid.IntRange(0, 2).Draw(rt, "age")) // sometimes late
			before := c.Revision(taskType)
			applied := false
			if rapid.IntRange(0, 3).Draw(rt, "op") == 0 {
				c.Apply(controller.Event{Resource: stored(t, taskType, name, uid, version, "", nil), Deleted: true})
				if m, ok := model[name]; ok && m.uid == uid {
					delete(model, name)
					applied = true
				}
			} else {
				value := rapid.SampledFrom([]string{"x", "y", ""}).Draw(rt, "value")
				owner := rapid.SampledFrom([]string{"", "d1", "d2"}).Draw(rt, "owner")
				c.Apply(controller.Event{Resource: stored(t, taskType, name, uid, version, value, owners[owner])})
				// The same version of the same incarnation is a repeat
				// (the store never writes two things under one version).
				if m, ok := model[name]; !ok || m.uid != uid || m.version < version {
					model[name] = modelEntry{uid: uid, version: version, value: value, owner: owner}
					applied = true
				}
			}
			if after := c.Revision(taskType); applied != (after > before) || after < before {
				rt.Fatalf("revision %d -> %d for an event applied: %v", before, after, applied)
			}
			if !rapid.Bool().Draw(rt, "read") {
				continue
			}
			want := func(keep func(modelEntry) bool) []string {
				var w []string
				for n, m := range model {
					if keep(m) {
						w = append(w, fmt.Sprintf("%s@%d", n, m.version))
					}
				}
				slices.Sort(w)
				return w
			}
			check := func(what string, got []string, w []string) {
				if len(got) == 0 && len(w) == 0 {
					return
				}
				if !slices.Equal(got, w) {
					rt.Fatalf("%s = %q, want %q", what, got, w)
				}
			}
			check("List", hand(c.List(taskType)), want(func(modelEntry) bool { return true }))
			for _, o := range c.List(taskType) {
				m := model[o.Resource.GetId().GetName()]
				if got, ok := controller.DerivedOf[string](o, tagged); !ok || got != fmt.Sprintf("%s@%d", m.value, m.version) {
					rt.Fatalf("%s: derived %q, want %s@%d", o.Resource.GetId().GetName(), got, m.value, m.version)
				}
			}
			for _, v := range []string{"x", "y"} {
				check("ByIndex(value, "+v+")", hand(c.ByIndex(taskType, "value", v)), want(func(m modelEntry) bool { return m.value == v }))
			}
			for o, oid := range owners {
				check("ByIndex(owner, "+o+")", hand(c.ByIndex(taskType, controller.IndexOwner, controller.OwnerKey(oid))), want(func(m modelEntry) bool { return m.owner == o }))
			}
		}
		for _, h := range out {
			if got := names(h.slice); !slices.Equal(got, h.names) {
				rt.Fatalf("a slice handed out as %q now reads %q", h.names, got)
			}
		}
		if err := c.Verify(); err != nil {
			rt.Fatal(err)
		}
	})
}

// Readers racing the watch's writer each get a sorted slice whose members
// are all filed under the key they asked for (run with -race: the lazy
// rebuild of a shared slice happens on the readers' side).
func TestCacheReadsRacingApply(t *testing.T) {
	c := newTaskCache(t)
	done := make(chan struct{})
	errs := make(chan error, 2)
	for r := range 2 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				v := []string{"x", "y"}[r]
				got := c.ByIndex(taskType, "value", v)
				for i, o := range got {
					if d, _ := controller.Decoded[*wrapperspb.StringValue](o); d.GetValue() != v {
						errs <- fmt.Errorf("ByIndex(%s) holds %s=%s", v, o.Resource.GetId().GetName(), d.GetValue())
						return
					}
					if i > 0 && got[i-1].Resource.GetId().GetName() >= o.Resource.GetId().GetName() {
						errs <- fmt.Errorf("ByIndex(%s) out of order: %q", v, names(got))
						return
					}
				}
				_ = c.List(taskType)
			}
		}()
	}
	for i := range 2000 {
		name := fmt.Sprintf("t%02d", i%40)
		c.Apply(controller.Event{Resource: stored(t, taskType, name, "u", uint64(i+1), []string{"x", "y"}[i%3%2], nil)})
		if i%7 == 0 {
			c.Apply(controller.Event{Resource: stored(t, taskType, name, "u", uint64(i+1), "", nil), Deleted: true})
		}
	}
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
