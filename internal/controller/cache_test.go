package controller_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
)

// byValue files a test resource under its data's string value.
var byValue = &controller.Index{Name: "value", Keys: func(o *controller.Object) []string {
	if v, ok := controller.Decoded[*wrapperspb.StringValue](o); ok && v.GetValue() != "" {
		return []string{v.GetValue()}
	}
	return nil
}}

// stored builds a resource as the store would hand it on: a uid, a
// version, data of value, an owner when given.
func stored(t testing.TB, typ *pbresource.Type, name, uid string, version uint64, value string, owner *pbresource.ID) *pbresource.Resource {
	t.Helper()
	data, err := anypb.New(wrapperspb.String(value))
	if err != nil {
		t.Fatal(err)
	}
	rid := id(typ, name)
	rid.Uid = uid
	return &pbresource.Resource{Id: rid, Owner: owner, Version: fmt.Sprint(version), Data: data}
}

// names returns "name@version" of each object, in order.
func names(objs []*controller.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Resource.GetId().GetName() + "@" + o.Resource.GetVersion()
	}
	return out
}

func newTaskCache(t *testing.T) *controller.Cache {
	t.Helper()
	c := controller.NewCache(controller.CheckReadOnly())
	if err := c.Declare(controller.CachedType{Type: taskType, Indexes: []*controller.Index{byValue}, Derived: []*controller.Derived{tagged}}); err != nil {
		t.Fatal(err)
	}
	return c
}

// A derived value is the cache's, of the object as it applied it: an
// object it did not make, or a Derived not declared on the type, has none.
func TestDerivedOf(t *testing.T) {
	c := newTaskCache(t)
	c.Apply(controller.Event{Resource: stored(t, taskType, "a", "u1", 2, "x", nil)})
	o := c.Get(id(taskType, "a"))
	if v, ok := controller.DerivedOf[string](o, tagged); !ok || v != "x@2" {
		t.Fatalf("DerivedOf = %q, %v; want x@2", v, ok)
	}
	if _, ok := controller.DerivedOf[int](o, tagged); ok {
		t.Fatal("a derived value of another type was handed out")
	}
	undeclared := &controller.Derived{Name: "tagged", Make: tagged.Make}
	if _, ok := controller.DerivedOf[string](o, undeclared); ok {
		t.Fatal("a Derived not declared (another of the same name) has a value")
	}
	if _, ok := controller.DerivedOf[string](&controller.Object{Resource: o.Resource, Data: o.Data}, tagged); ok {
		t.Fatal("an object the cache did not make has a derived value")
	}
	c.Apply(controller.Event{Resource: stored(t, taskType, "a", "u1", 3, "y", nil)})
	if v, _ := controller.DerivedOf[string](c.Get(id(taskType, "a")), tagged); v != "y@3" {
		t.Fatalf("after a change: %q, want y@3", v)
	}
	if v, _ := controller.DerivedOf[string](o, tagged); v != "x@2" {
		t.Fatalf("the old object's value changed: %q", v)
	}
}

// The cache follows a sequence of events; each case says what the lookups
// answer after it.
func TestCacheApply(t *testing.T) {
	d1, d2 := id(deploymentType, "d1"), id(deploymentType, "d2")
	type step struct {
		name, uid string
		version   uint64
		value     string
		owner     *pbresource.ID
		deleted   bool
	}
	cases := []struct {
		name    string
		steps   []step
		list    []string
		byValue map[string][]string
		byOwner map[*pbresource.ID][]string
	}{
		{
			name:    "upserts are filed under their keys",
			steps:   []step{{name: "b", uid: "1", version: 2, value: "x", owner: d1}, {name: "a", uid: "2", version: 3, value: "x", owner: d2}, {name: "c", uid: "3", version: 4, value: "y"}},
			list:    []string{"a@3", "b@2", "c@4"},
			byValue: map[string][]string{"x": {"a@3", "b@2"}, "y": {"c@4"}, "z": {}},
			byOwner: map[*pbresource.ID][]string{d1: {"b@2"}, d2: {"a@3"}},
		},
		{
			name:    "an update moves a resource between keys",
			steps:   []step{{name: "a", uid: "1", version: 2, value: "x", owner: d1}, {name: "a", uid: "1", version: 3, value: "y", owner: d2}},
			list:    []string{"a@3"},
			byValue: map[string][]string{"x": {}, "y": {"a@3"}},
			byOwner: map[*pbresource.ID][]string{d1: {}, d2: {"a@3"}},
		},
		{
			name:    "an empty key list leaves a resource out of the index",
			steps:   []step{{name: "a", uid: "1", version: 2, value: "x"}, {name: "a", uid: "1", version: 3, value: ""}},
			list:    []string{"a@3"},
			byValue: map[string][]string{"x": {}, "": {}},
		},
		{
			name:    "a delete removes it from every index",
			steps:   []step{{name: "a", uid: "1", version: 2, value: "x", owner: d1}, {name: "a", uid: "1", version: 3, deleted: true}},
			list:    []string{},
			byValue: map[string][]string{"x": {}},
			byOwner: map[*pbresource.ID][]string{d1: {}},
		},
		{
			name:    "a delete of another incarnation is ignored",
			steps:   []step{{name: "a", uid: "2", version: 5, value: "x"}, {name: "a", uid: "1", version: 3, deleted: true}},
			list:    []string{"a@5"},
			byValue: map[string][]string{"x": {"a@5"}},
		},
		{
			name:    "an older version of the same incarnation never rolls it back",
			steps:   []step{{name: "a", uid: "1", version: 5, value: "new"}, {name: "a", uid: "1", version: 4, value: "old"}},
			list:    []string{"a@5"},
			byValue: map[string][]string{"new": {"a@5"}, "old": {}},
		},
		{
			name:    "a new incarnation replaces the old whatever its version",
			steps:   []step{{name: "a", uid: "1", version: 5, value: "x", owner: d1}, {name: "a", uid: "2", version: 4, value: "y"}},
			list:    []string{"a@4"},
			byValue: map[string][]string{"x": {}, "y": {"a@4"}},
			byOwner: map[*pbresource.ID][]string{d1: {}},
		},
		{
			name:  "a delete of what was never seen changes nothing",
			steps: []step{{name: "a", uid: "1", version: 3, deleted: true}},
			list:  []string{},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newTaskCache(t)
			for _, s := range tc.steps {
				c.Apply(controller.Event{Resource: stored(t, taskType, s.name, s.uid, s.version, s.value, s.owner), Deleted: s.deleted})
			}
			if got := names(c.List(taskType)); !slices.Equal(got, tc.list) {
				t.Errorf("List = %q, want %q", got, tc.list)
			}
			for key, want := range tc.byValue {
				if got := names(c.ByIndex(taskType, "value", key)); !slices.Equal(got, want) {
					t.Errorf("ByIndex(value, %q) = %q, want %q", key, got, want)
				}
			}
			for owner, want := range tc.byOwner {
				if got := names(c.ByIndex(taskType, controller.IndexOwner, controller.OwnerKey(owner))); !slices.Equal(got, want) {
					t.Errorf("ByIndex(owner, %s) = %q, want %q", owner.GetName(), got, want)
				}
			}
			if err := c.Verify(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestCacheGet(t *testing.T) {
	c := newTaskCache(t)
	c.Apply(controller.Event{Resource: stored(t, taskType, "a", "u1", 2, "x", nil)})
	got := c.Get(id(taskType, "a"))
	if got == nil || got.Resource.GetVersion() != "2" {
		t.Fatalf("Get(a) = %v, want version 2", got)
	}
	if v, ok := controller.Decoded[*wrapperspb.StringValue](got); !ok || v.GetValue() != "x" {
		t.Errorf("Decoded = %v, %v; want x", v, ok)
	}
	if _, ok := controller.Decoded[*wrapperspb.Int64Value](got); ok {
		t.Error("Decoded as another type succeeded")
	}
	withUID := id(taskType, "a")
	withUID.Uid = "u1"
	if c.Get(withUID) == nil {
		t.Error("Get with the stored uid found nothing")
	}
	withUID.Uid = "u0"
	if o := c.Get(withUID); o != nil {
		t.Errorf("Get with another uid = %v, want nil", o)
	}
	if o := c.Get(id(taskType, "b")); o != nil {
		t.Errorf("Get(b) = %v, want nil", o)
	}
}

// A resource whose data does not decode is cached with the reason, filed
// by owner, and left out of indexes that need its data.
func TestCacheKeepsWhatDoesNotDecode(t *testing.T) {
	c := newTaskCache(t)
	res := stored(t, taskType, "a", "u1", 2, "x", id(deploymentType, "d"))
	res.Data.TypeUrl = "type.googleapis.com/no.such.Message"
	c.Apply(controller.Event{Resource: res})
	o := c.Get(id(taskType, "a"))
	if o == nil || o.Data != nil || o.DecodeErr == nil {
		t.Fatalf("Get = %+v, want the resource with a DecodeErr and no Data", o)
	}
	if got := names(c.ByIndex(taskType, controller.IndexOwner, controller.OwnerKey(id(deploymentType, "d")))); !slices.Equal(got, []string{"a@2"}) {
		t.Errorf("by owner = %q", got)
	}
	if got := c.ByIndex(taskType, "value", "x"); len(got) != 0 {
		t.Errorf("by value = %q, want nothing", names(got))
	}
}

func TestCacheDeclareRefuses(t *testing.T) {
	other := &controller.Index{Name: "value", Keys: byValue.Keys}
	cases := []struct {
		name   string
		decl   []controller.CachedType
		reason string
	}{
		{"partial type", []controller.CachedType{{Type: &pbresource.Type{Kind: "Task"}}}, "Cached[0].Type: needs group"},
		{"type twice", []controller.CachedType{{Type: taskType}, {Type: taskType}}, "Cached[1].Type: test/v1/Task is cached twice"},
		{"nil index", []controller.CachedType{{Type: taskType, Indexes: []*controller.Index{nil}}}, "Cached[0].Indexes[0]: nil"},
		{"unnamed index", []controller.CachedType{{Type: taskType, Indexes: []*controller.Index{{Keys: byValue.Keys}}}}, "Cached[0].Indexes[0].Name: required"},
		{"owner redeclared", []controller.CachedType{{Type: taskType, Indexes: []*controller.Index{{Name: controller.IndexOwner, Keys: byValue.Keys}}}}, "owner is built in"},
		{"index without keys", []controller.CachedType{{Type: taskType, Indexes: []*controller.Index{{Name: "k"}}}}, "Cached[0].Indexes[0].Keys: required"},
		{"another index of a declared name", []controller.CachedType{{Type: taskType, Indexes: []*controller.Index{other}}}, "index value of test/v1/Task is already declared"},
		{"nil derived", []controller.CachedType{{Type: taskType, Derived: []*controller.Derived{nil}}}, "Cached[0].Derived[0]: nil"},
		{"unnamed derived", []controller.CachedType{{Type: taskType, Derived: []*controller.Derived{{Make: tagged.Make}}}}, "Cached[0].Derived[0].Name: required"},
		{"derived without make", []controller.CachedType{{Type: taskType, Derived: []*controller.Derived{{Name: "d"}}}}, "Cached[0].Derived[0].Make: required"},
		{"derived twice", []controller.CachedType{{Type: taskType, Derived: []*controller.Derived{tagged, {Name: "tagged", Make: tagged.Make}}}}, "Cached[0].Derived[1].Name: tagged is declared twice"},
		{"another derived of a declared name", []controller.CachedType{{Type: taskType, Derived: []*controller.Derived{{Name: "tagged", Make: tagged.Make}}}}, "derived value tagged of test/v1/Task is already declared"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newTaskCache(t)
			err := c.Declare(tc.decl...)
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("Declare = %v, want an error saying %q", err, tc.reason)
			}
		})
	}

	c := newTaskCache(t)
	// The same Index again, from another controller, is shared.
	if err := c.Declare(controller.CachedType{Type: taskType, Indexes: []*controller.Index{byValue}}, controller.CachedType{Type: instanceType}); err != nil {
		t.Fatalf("declaring the same index again: %v", err)
	}
	c.Apply(controller.Event{Resource: stored(t, taskType, "a", "u1", 2, "x", nil)})
	if err := c.Declare(controller.CachedType{Type: deploymentType}); !errors.Is(err, controller.ErrCacheInUse) {
		t.Errorf("Declare once fed = %v, want ErrCacheInUse", err)
	}
}

func TestCacheReadsOfUndeclaredThingsPanic(t *testing.T) {
	c := newTaskCache(t)
	for name, read := range map[string]func(){
		"Get of an undeclared type":     func() { c.Get(id(instanceType, "i")) },
		"List of an undeclared type":    func() { c.List(instanceType) },
		"ByIndex of an undeclared type": func() { c.ByIndex(instanceType, controller.IndexOwner, "") },
		"ByIndex of an undeclared name": func() { c.ByIndex(taskType, "nope", "") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			read()
		}()
	}
	// An event of a type nobody caches is not kept.
	c.Apply(controller.Event{Resource: stored(t, instanceType, "i", "u", 2, "", nil)})
	if c.Synced(instanceType) {
		t.Error("an uncached type is synced")
	}
}

// Under CheckReadOnly, a reader that edits a shared object is caught.
func TestCacheCheckReadOnlyCatchesAWriter(t *testing.T) {
	c := newTaskCache(t)
	c.Apply(controller.Event{Resource: stored(t, taskType, "a", "u1", 2, "x", nil)})
	o := c.Get(id(taskType, "a"))
	o.Data.(*wrapperspb.StringValue).Value = "edited"
	if err := c.Verify(); err == nil || !strings.Contains(err.Error(), "default/a") {
		t.Errorf("Verify = %v, want an error naming default/a", err)
	}
	defer func() {
		if v := recover(); v == nil || !strings.Contains(fmt.Sprint(v), "modified") {
			t.Errorf("applying the next version recovered %v, want a panic saying the object was modified", v)
		}
	}()
	c.Apply(controller.Event{Resource: stored(t, taskType, "a", "u1", 3, "y", nil)})
}

// The slices List and ByIndex return are shared between reads and kept
// until a change; a change makes a new one, never edits one handed out.
func TestCacheReadsShareTheirSlicesUntilAChange(t *testing.T) {
	c := newTaskCache(t)
	for i, n := range []string{"c", "a", "b"} {
		c.Apply(controller.Event{Resource: stored(t, taskType, n, "u-"+n, uint64(i+2), "x", nil)})
	}
	first := c.List(taskType)
	if again := c.List(taskType); &again[0] != &first[0] {
		t.Error("a second List without a change made a new slice")
	}
	if cap(first) != len(first) {
		t.Errorf("List's slice has room to append in place (len %d, cap %d)", len(first), cap(first))
	}
	byKey := c.ByIndex(taskType, "value", "x")

	// In place: b reports.
	c.Apply(controller.Event{Resource: stored(t, taskType, "b", "u-b", 9, "x", nil)})
	if got := names(c.List(taskType)); !slices.Equal(got, []string{"a@3", "b@9", "c@2"}) {
		t.Errorf("List after b changed = %q", got)
	}
	if got := names(c.ByIndex(taskType, "value", "x")); !slices.Equal(got, []string{"a@3", "b@9", "c@2"}) {
		t.Errorf("ByIndex after b changed = %q", got)
	}
	// Membership: b moves to another key, d comes.
	c.Apply(controller.Event{Resource: stored(t, taskType, "b", "u-b", 10, "y", nil)})
	c.Apply(controller.Event{Resource: stored(t, taskType, "d", "u-d", 11, "x", nil)})
	if got := names(c.ByIndex(taskType, "value", "x")); !slices.Equal(got, []string{"a@3", "c@2", "d@11"}) {
		t.Errorf("ByIndex(x) after b left and d came = %q", got)
	}
	if got := names(c.List(taskType)); !slices.Equal(got, []string{"a@3", "b@10", "c@2", "d@11"}) {
		t.Errorf("List after d came = %q", got)
	}
	// What was handed out before is as it was.
	if got := names(first); !slices.Equal(got, []string{"a@3", "b@4", "c@2"}) {
		t.Errorf("a List handed out earlier now reads %q", got)
	}
	if got := names(byKey); !slices.Equal(got, []string{"a@3", "b@4", "c@2"}) {
		t.Errorf("a ByIndex handed out earlier now reads %q", got)
	}
}
