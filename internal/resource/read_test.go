package resource_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
)

func names(res []*pbresource.Resource) []string {
	out := make([]string, len(res))
	for i, r := range res {
		out[i] = r.GetId().GetTenancy().GetNamespace() + "/" + r.GetId().GetName()
	}
	return out
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReadListDelete(t *testing.T) {
	h := newHarness(t)
	h.createNamespace("team-a")
	web := h.write(widget(t, "", "web", "v1"))
	h.write(widget(t, "", "api", "v1"))
	h.write(widget(t, "team-a", "web", "v1"))
	h.write(widget(t, "team-a", "worker", "v1"))
	h.write(gizmo(t, "team-a", "web"))

	// Read, eventual and strong; the copy is the caller's to change.
	for _, consistent := range []bool{false, true} {
		out, err := h.svc.Read(h.ctx, &pbresource.ReadRequest{Id: widgetID("", "web"), Consistent: consistent})
		if err != nil || !proto.Equal(out.GetResource(), web) {
			t.Fatalf("read (consistent=%v): %v, %v", consistent, out, err)
		}
		out.GetResource().Data = anyOf(t, wrapperspb.String("scribbled"))
		if !proto.Equal(h.stored(web.GetId()), web) {
			t.Fatal("changing a read result changed the store")
		}
	}
	_, err := h.svc.Read(h.ctx, &pbresource.ReadRequest{Id: widgetID("", "nope")})
	requireCode(t, err, codes.NotFound, "demo/v1/Widget/default/nope: resource not found")
	_, err = h.svc.Read(h.ctx, &pbresource.ReadRequest{Id: &pbresource.ID{Type: widgetType, Name: "web", Uid: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}})
	requireCode(t, err, codes.Aborted, "different uid")
	_, err = h.svc.Read(h.ctx, &pbresource.ReadRequest{Id: widgetID("", "Web")})
	requireCode(t, err, codes.InvalidArgument, `id.name: "Web" is not a valid name`)
	_, err = h.svc.Read(h.ctx, &pbresource.ReadRequest{})
	requireCode(t, err, codes.InvalidArgument, "id: is required")

	// List.
	list := func(ns, prefix string) []string {
		t.Helper()
		out, err := h.svc.List(h.ctx, &pbresource.ListRequest{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: ns}, NamePrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return names(out.GetResources())
	}
	for _, c := range []struct {
		ns, prefix string
		want       []string
	}{
		{"", "", []string{"default/api", "default/web"}},
		{"default", "w", []string{"default/web"}},
		{"team-a", "", []string{"team-a/web", "team-a/worker"}},
		{"*", "", []string{"default/api", "default/web", "team-a/web", "team-a/worker"}},
		{"*", "wo", []string{"team-a/worker"}},
		{"empty-ns", "", []string{}},
	} {
		if got := list(c.ns, c.prefix); !equalStrings(got, c.want) {
			t.Errorf("list %q %q = %v, want %v", c.ns, c.prefix, got, c.want)
		}
	}
	_, err = h.svc.List(h.ctx, &pbresource.ListRequest{Type: &pbresource.Type{Group: "x", GroupVersion: "v1", Kind: "Y"}})
	requireCode(t, err, codes.InvalidArgument, `type: unknown resource type "x/v1/Y"`)
	_, err = h.svc.List(h.ctx, &pbresource.ListRequest{})
	requireCode(t, err, codes.InvalidArgument, "type: is required")
	_, err = h.svc.List(h.ctx, &pbresource.ListRequest{Type: widgetType, NamePrefix: "A"})
	requireCode(t, err, codes.InvalidArgument, "name_prefix:")
	_, err = h.svc.List(h.ctx, &pbresource.ListRequest{Type: gadgetType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	requireCode(t, err, codes.InvalidArgument, "tenancy.namespace: must be empty")

	// Delete: CAS, idempotent, and the old uid is a no-op.
	before := h.state()
	_, err = h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: web.GetId(), Version: "1"})
	requireCode(t, err, codes.Aborted, "demo/v1/Widget/default/web: version conflict", "re-read the resource and retry")
	h.requireUnchanged(before)
	if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: widgetID("", "web"), Version: web.GetVersion()}); err != nil {
		t.Fatal(err)
	}
	if h.stored(web.GetId()) != nil {
		t.Fatal("not deleted")
	}
	before = h.state()
	if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: widgetID("", "web")}); err != nil {
		t.Fatalf("deleting what is gone: %v", err)
	}
	h.requireUnchanged(before)
	again := h.write(widget(t, "", "web", "v1"))
	if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: web.GetId()}); err != nil {
		t.Fatalf("deleting an old uid: %v", err)
	}
	if !proto.Equal(h.stored(again.GetId()), again) {
		t.Fatal("deleting by an old uid deleted the new incarnation")
	}
	_, err = h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: widgetID("", "-bad")})
	requireCode(t, err, codes.InvalidArgument, `id.name: "-bad" is not a valid name`)
}

func TestListByOwner(t *testing.T) {
	h := newHarness(t)
	h.createNamespace("team-a")
	owner := h.write(gadget(t, "owner", 1))
	for _, r := range []*pbresource.Resource{widget(t, "", "a", "v"), widget(t, "team-a", "b", "v"), gizmo(t, "team-a", "c")} {
		r.Owner = owner.GetId()
		h.write(r)
	}
	h.write(widget(t, "", "unowned", "v"))
	out, err := h.svc.ListByOwner(h.ctx, &pbresource.ListByOwnerRequest{Owner: owner.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(out.GetResources()); got != 3 {
		t.Fatalf("%d owned, want 3: %v", got, names(out.GetResources()))
	}
	_, err = h.svc.ListByOwner(h.ctx, &pbresource.ListByOwnerRequest{Owner: &pbresource.ID{Type: gadgetType, Name: "owner"}})
	requireCode(t, err, codes.InvalidArgument, "owner.uid: is required")
	_, err = h.svc.ListByOwner(h.ctx, &pbresource.ListByOwnerRequest{})
	requireCode(t, err, codes.InvalidArgument, "owner: is required")

	// Deleting the owner leaves what it owns to the owner reaper.
	if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: owner.GetId()}); err != nil {
		t.Fatal(err)
	}
	if h.stored(widgetID("default", "a")) == nil {
		t.Fatal("Delete deleted an owned resource itself")
	}
}

func TestNamespaceRules(t *testing.T) {
	h := newHarness(t)

	// "default" exists without being stored.
	h.write(widget(t, "", "w", "v"))
	h.write(widget(t, "default", "w2", "v"))

	before := h.state()
	_, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(t, "team-a", "w", "v")})
	requireCode(t, err, codes.FailedPrecondition, `id.tenancy.namespace: namespace "team-a" does not exist: create it first`)
	h.requireUnchanged(before)

	ns := h.createNamespace("team-a")
	h.write(widget(t, "team-a", "w1", "v"))
	h.write(widget(t, "team-a", "w2", "v"))
	h.write(gizmo(t, "team-a", "g1"))

	// Not empty: refused, naming how many of which type.
	before = h.state()
	_, err = h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: ns.GetId()})
	requireCode(t, err, codes.FailedPrecondition, `namespace "team-a" is not empty: it still holds 1 demo/v1/Gizmo, 2 demo/v1/Widget; delete those first`)
	h.requireUnchanged(before)

	// "default" can never be deleted, stored or not.
	for _, stored := range []bool{false, true} {
		if stored {
			if err := core.Bootstrap(h.ctx, h.svc); err != nil {
				t.Fatal(err)
			}
		}
		before = h.state()
		_, err = h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: resource.NamespaceID("default")})
		requireCode(t, err, codes.InvalidArgument, `id.name: the "default" namespace cannot be deleted`)
		h.requireUnchanged(before)
	}

	// Emptied, it goes; then writes into it are refused again.
	for _, id := range []*pbresource.ID{widgetID("team-a", "w1"), widgetID("team-a", "w2"), {Type: gizmoType, Tenancy: &pbresource.Tenancy{Namespace: "team-a"}, Name: "g1"}} {
		if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: ns.GetId()}); err != nil {
		t.Fatal(err)
	}
	_, err = h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(t, "team-a", "w", "v")})
	requireCode(t, err, codes.FailedPrecondition, `namespace "team-a" does not exist`)

	// A Namespace is cluster-scoped.
	bad, _ := core.NewNamespace("team-b", "")
	bad.Id.Tenancy = &pbresource.Tenancy{Namespace: "default"}
	_, err = h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: bad})
	requireCode(t, err, codes.InvalidArgument, "id.tenancy.namespace: must be empty: core/v1/Namespace is cluster-scoped")
}
