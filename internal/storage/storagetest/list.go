package storagetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// listFixture stores resources whose names and namespaces trap a backend
// that compares prefixes of its keys carelessly, in an order that is not
// the listing order, and returns them by "namespace/name" of the main type.
func listFixture(t *testing.T, b storage.Backend, typ *pbresource.Type, neighbours []*pbresource.Type, clusterType *pbresource.Type) (map[string]*pbresource.Resource, *pbresource.Resource) {
	t.Helper()
	stored := map[string]*pbresource.Resource{}
	for _, nn := range []string{
		"b-ns/web-1", "a-ns/web-2", "a-ns/web", "a-ns-x/web", "a-ns/web-10",
		"b-ns/db", "a-ns/a", "a-ns/web1", "a-ns/web-1",
	} {
		ns, name, _ := strings.Cut(nn, "/")
		stored[nn] = mustWrite(t, b, newResource(typ, ns, name))
	}
	for _, nt := range neighbours {
		mustWrite(t, b, newResource(nt, "a-ns", "web"))
	}
	mustWrite(t, b, newResource(clusterType, "", "y"))
	last := mustWrite(t, b, newResource(clusterType, "", "x"))
	return stored, last
}

func testListQueries(t *testing.T, b storage.Backend) {
	typ := testType("ListA")
	otherVersion := &pbresource.Type{Group: typ.Group, GroupVersion: "v2", Kind: typ.Kind}
	otherGroup := &pbresource.Type{Group: typ.Group + "2", GroupVersion: typ.GroupVersion, Kind: typ.Kind}
	otherKind := testType("ListB")
	kindPrefix := testType("List") // a prefix of ListA's kind
	clusterType := testType("ListCluster")
	stored, last := listFixture(t, b, typ, []*pbresource.Type{otherVersion, otherGroup, otherKind}, clusterType)

	all := []string{
		"a-ns/a", "a-ns/web", "a-ns/web-1", "a-ns/web-10", "a-ns/web-2", "a-ns/web1",
		"a-ns-x/web", "b-ns/db", "b-ns/web-1",
	}
	for _, tc := range []struct {
		name   string
		typ    *pbresource.Type
		ns     string
		prefix string
		want   []string // "namespace/name", in order
	}{
		{"one namespace", typ, "a-ns", "", all[:6]},
		{"other namespace", typ, "b-ns", "", []string{"b-ns/db", "b-ns/web-1"}},
		{"namespace whose name extends another", typ, "a-ns-x", "", []string{"a-ns-x/web"}},
		{"namespace with nothing", typ, "c-ns", "", nil},
		{"namespace prefix is not a namespace", typ, "a-", "", nil},
		{"name prefix", typ, "a-ns", "web-", []string{"a-ns/web-1", "a-ns/web-10", "a-ns/web-2"}},
		{"name prefix that is a whole name", typ, "a-ns", "web-1", []string{"a-ns/web-1", "a-ns/web-10"}},
		{"name prefix matching nothing", typ, "a-ns", "zzz", nil},
		{"every namespace", typ, ids.WildcardNamespace, "", all},
		{"every namespace, name prefix", typ, ids.WildcardNamespace, "web-1", []string{"a-ns/web-1", "a-ns/web-10", "b-ns/web-1"}},
		{"another group version", otherVersion, ids.WildcardNamespace, "", []string{"a-ns/web"}},
		{"another group", otherGroup, "a-ns", "", []string{"a-ns/web"}},
		{"another kind", otherKind, "a-ns", "", []string{"a-ns/web"}},
		{"a kind that prefixes the kind", kindPrefix, ids.WildcardNamespace, "", nil},
		{"a type never written", testType("ListNever"), ids.WildcardNamespace, "", nil},
		{"cluster-scoped", clusterType, "", "", []string{"/x", "/y"}},
		{"cluster-scoped, every namespace", clusterType, ids.WildcardNamespace, "", []string{"/x", "/y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waitApplied(t, b, last.GetId(), last.GetVersion())
			for _, c := range consistencies {
				got, err := b.List(t.Context(), c, tc.typ, tenancy(tc.ns), tc.prefix)
				if err != nil {
					t.Fatalf("%s List: %v", c, err)
				}
				if names := nsNames(got); !slices.Equal(names, tc.want) {
					t.Fatalf("%s List(%s, %q, %q) = %q, want %q", c, ids.TypeString(tc.typ), tc.ns, tc.prefix, names, tc.want)
				}
				if !ids.SameType(tc.typ, typ) {
					continue
				}
				for _, res := range got {
					if want := stored[nsName(res)]; !proto.Equal(res, want) {
						t.Errorf("%s List returned\n %v\nbut stored was\n %v", c, res, want)
					}
				}
			}
		})
	}
}

// testListAfterChanges: List shows updates and forgets deletions.
func testListAfterChanges(t *testing.T, b storage.Backend) {
	typ := testType("ListChanges")
	a := mustWrite(t, b, newResource(typ, "default", "a"))
	bb := mustWrite(t, b, newResource(typ, "default", "b"))
	c := mustWrite(t, b, newResource(typ, "default", "c"))
	bb = mustWrite(t, b, withData(bb, "updated"))
	mustDelete(t, b, a.GetId(), "")
	last := mustWrite(t, b, newResource(typ, "default", "d"))
	waitApplied(t, b, last.GetId(), last.GetVersion())
	want := []*pbresource.Resource{bb, c, last}
	for _, cons := range consistencies {
		got, err := b.List(t.Context(), cons, typ, tenancy(ids.WildcardNamespace), "")
		if err != nil {
			t.Fatalf("%s List: %v", cons, err)
		}
		requireSameResources(t, fmt.Sprintf("%s List", cons), got, want)
	}
}

func testListByOwner(t *testing.T, b storage.Backend) {
	typ := testType("OwnerParent")
	childType := testType("OwnerChild")
	otherChildType := testType("OwnerChildOther")

	owner := mustWrite(t, b, newResource(typ, "default", "owner"))
	other := mustWrite(t, b, newResource(typ, "default", "other"))
	oldOwner := idWithUID(owner.GetId(), newUID()) // an earlier incarnation
	owned := func(childTyp *pbresource.Type, ns, name string, by *pbresource.ID) *pbresource.Resource {
		res := newResource(childTyp, ns, name)
		res.Owner = proto.Clone(by).(*pbresource.ID)
		return mustWrite(t, b, res)
	}
	c1 := owned(childType, "default", "c1", owner.GetId())
	c2 := owned(otherChildType, "elsewhere", "c2", owner.GetId())
	c3 := owned(childType, "default", "c3", owner.GetId())
	owned(childType, "default", "of-old-owner", oldOwner)
	ofOther := owned(childType, "default", "of-other", other.GetId())
	mustWrite(t, b, newResource(childType, "default", "orphan"))

	check := func(what string, by *pbresource.ID, want []*pbresource.Resource, last *pbresource.Resource) {
		t.Helper()
		// ListByOwner has no consistency argument, so it may read a local
		// copy: wait for that copy to have the last change.
		waitApplied(t, b, last.GetId(), last.GetVersion())
		got, err := b.ListByOwner(t.Context(), by)
		if err != nil {
			t.Fatalf("ListByOwner(%s): %v", what, err)
		}
		requireSameResources(t, "ListByOwner("+what+")", got, want)
	}
	last := mustWrite(t, b, newResource(childType, "default", "last"))
	check("owner", owner.GetId(), []*pbresource.Resource{c1, c2, c3}, last)
	check("other", other.GetId(), []*pbresource.Resource{ofOther}, last)
	check("owner without uid", idWithUID(owner.GetId(), ""), nil, last)
	check("a resource that owns nothing", c1.GetId(), nil, last)

	// Deleting a child or clearing its owner removes it from the list.
	mustDelete(t, b, c1.GetId(), "")
	cleared := proto.Clone(c3).(*pbresource.Resource)
	cleared.Owner = nil
	cleared = mustWrite(t, b, cleared)
	check("owner after changes", owner.GetId(), []*pbresource.Resource{c2}, cleared)
}

// requireSameResources compares two sets of resources, in any order.
func requireSameResources(t *testing.T, what string, got, want []*pbresource.Resource) {
	t.Helper()
	key := func(r *pbresource.Resource) string { return ids.String(r.GetId()) }
	byKey := map[string]*pbresource.Resource{}
	for _, r := range got {
		if _, dup := byKey[key(r)]; dup {
			t.Fatalf("%s returned %s twice", what, key(r))
		}
		byKey[key(r)] = r
	}
	ok := len(got) == len(want)
	for _, w := range want {
		if !proto.Equal(byKey[key(w)], w) {
			ok = false
		}
	}
	if !ok {
		t.Fatalf("%s returned\n %v\nwant (in any order)\n %v", what, describeAll(got), describeAll(want))
	}
}

func describeAll(rs []*pbresource.Resource) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = describe(r)
	}
	return out
}

func nsName(r *pbresource.Resource) string {
	return r.GetId().GetTenancy().GetNamespace() + "/" + r.GetId().GetName()
}

func nsNames(rs []*pbresource.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, nsName(r))
	}
	return out
}
