package resource_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

func versionIs(id *pbresource.ID, version string) *pbresource.Compare {
	return &pbresource.Compare{Op: pbresource.Compare_OP_VERSION, Id: id, Version: version}
}

// A batch writes only when its compares hold, in the same step; a failed
// one is named and nothing is written.
func TestWriteBatchCompares(t *testing.T) {
	h := newHarness(t)
	h.createNamespace("team-a")
	x := h.write(widget(t, "team-a", "x", "v1"))

	out, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{widget(t, "team-a", "y", "v1")},
		Compares: []*pbresource.Compare{
			versionIs(x.GetId(), x.GetVersion()),
			{Op: pbresource.Compare_OP_ABSENT, Id: widgetID("team-a", "z")},
			{Op: pbresource.Compare_OP_EXISTS, Id: widgetID("team-a", "x")},
			{Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "team-a"}}, Version: x.GetVersion()},
		},
	})
	if err != nil {
		t.Fatalf("a batch whose compares hold: %v", err)
	}
	if len(out.GetResources()) != 1 || h.stored(widgetID("team-a", "y")) == nil {
		t.Fatalf("the batch returned %v; want y, stored", out.GetResources())
	}

	stale := x.GetVersion()
	x = h.write(widget(t, "team-a", "x", "v2"))
	for name, c := range map[string]struct {
		compare *pbresource.Compare
		want    string
	}{
		"stale version": {versionIs(widgetID("team-a", "x"), stale), "it is at version " + x.GetVersion() + ", not " + stale},
		"name taken":    {&pbresource.Compare{Op: pbresource.Compare_OP_ABSENT, Id: widgetID("team-a", "y")}, "it exists"},
		"missing":       {&pbresource.Compare{Op: pbresource.Compare_OP_EXISTS, Id: widgetID("team-a", "nope")}, "it does not exist"},
		"written since": {&pbresource.Compare{Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "team-a"}}, Version: stale}, "demo/v1/Widget/team-a/x was written at version"},
	} {
		before := h.state()
		_, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{
			Resources: []*pbresource.Resource{widget(t, "team-a", "w", "v1")},
			Compares:  []*pbresource.Compare{{Op: pbresource.Compare_OP_EXISTS, Id: widgetID("team-a", "x")}, c.compare},
		})
		t.Run(name, func(t *testing.T) {
			requireCode(t, err, codes.Aborted, "compares[1]: conflict", c.want)
			h.requireUnchanged(before)
		})
	}

	// A batch whose members change nothing still checks its compares.
	before := h.state()
	_, err = h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{widget(t, "team-a", "x", "v2")},
		Compares:  []*pbresource.Compare{versionIs(widgetID("team-a", "y"), stale)},
	})
	requireCode(t, err, codes.Aborted, "compares[0]: conflict")
	h.requireUnchanged(before)
}

// Bad compares are refused naming the field, before anything is read or
// written.
func TestWriteBatchComparesValidated(t *testing.T) {
	h := newHarness(t)
	members := []*pbresource.Resource{widget(t, "", "a", "v1")}
	for _, c := range []struct {
		compare *pbresource.Compare
		want    string
	}{
		{&pbresource.Compare{Id: widgetID("", "x")}, "compares[0].op"},
		{&pbresource.Compare{Op: pbresource.Compare_OP_VERSION, Id: widgetID("", "x")}, "compares[0].version: is required"},
		{&pbresource.Compare{Op: pbresource.Compare_OP_EXISTS, Id: widgetID("", "x"), Version: "3"}, "compares[0].version: must be empty"},
		{&pbresource.Compare{Op: pbresource.Compare_OP_ABSENT, Id: &pbresource.ID{Type: widgetType, Name: "x", Uid: "u"}}, "compares[0].id.uid"},
		{&pbresource.Compare{Op: pbresource.Compare_OP_ABSENT, Id: &pbresource.ID{Type: &pbresource.Type{Group: "no", GroupVersion: "v1", Kind: "Such"}, Name: "x"}}, "compares[0].id.type: unknown resource type"},
		{&pbresource.Compare{Op: pbresource.Compare_OP_EXISTS, Id: widgetID("", "Bad_Name")}, "compares[0].id.name"},
		{&pbresource.Compare{Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "*"}}}, "compares[0].id.tenancy.namespace"},
		{&pbresource.Compare{Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: widgetType}, Version: "v7"}, "compares[0].version"},
		{&pbresource.Compare{Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: widgetType, Name: "UP"}}, "compares[0].id.name"},
	} {
		before := h.state()
		_, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: members, Compares: []*pbresource.Compare{c.compare}})
		requireCode(t, err, codes.InvalidArgument, c.want)
		h.requireUnchanged(before)
	}
}

// A compare tells whether a resource exists: it needs the read permission
// of what it looks at.
func TestWriteBatchCompareNeedsRead(t *testing.T) {
	p := &policy{deny: map[string]bool{"secret": true}}
	h := newHarness(t, withAuthorize(func(context.Context) (acl.Authorizer, error) { return p, nil }))
	before := h.state()
	_, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{widget(t, "", "a", "v1")},
		Compares:  []*pbresource.Compare{{Op: pbresource.Compare_OP_ABSENT, Id: widgetID("secret", "x")}},
	})
	requireCode(t, err, codes.PermissionDenied, "compares[0]")
	if !p.asked("namespace:read:secret") {
		t.Fatalf("the compare asked %v, not for the read of namespace secret", p.calls)
	}
	h.requireUnchanged(before)
}

// An owner and what it owns are created in one batch: the owned member
// names its owner without the uid, and gets the new one.
func TestWriteBatchCreatesOwnerWithOwned(t *testing.T) {
	h := newHarness(t)
	owner := widget(t, "", "owner", "v1")
	owned := gizmo(t, "", "owned")
	owned.Owner = widgetID("", "owner")
	out, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{owned, owner}})
	if err != nil {
		t.Fatalf("owner and owned in one batch: %v", err)
	}
	o, g := out.GetResources()[1], out.GetResources()[0]
	if uid := g.GetOwner().GetUid(); uid == "" || uid != o.GetId().GetUid() {
		t.Fatalf("owned's owner is %v, the owner %v", g.GetOwner(), o.GetId())
	}
	if !proto.Equal(h.stored(g.GetId()), g) {
		t.Fatalf("stored %v, returned %v", h.stored(g.GetId()), g)
	}
	list, err := h.svc.ListByOwner(h.ctx, &pbresource.ListByOwnerRequest{Owner: o.GetId()})
	if err != nil || len(list.GetResources()) != 1 {
		t.Fatalf("ListByOwner(owner) = %v, %v; want the owned gizmo", list.GetResources(), err)
	}

	// Again, unchanged: the owner's uid is the stored one, nothing moves.
	before := h.state()
	again := gizmo(t, "", "owned")
	again.Owner = widgetID("", "owner")
	if _, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{again, widget(t, "", "owner", "v1")}}); err != nil {
		t.Fatalf("the same batch again: %v", err)
	}
	h.requireUnchanged(before)

	// An owner named with a uid that the batch does not leave it with.
	wrong := gizmo(t, "", "other")
	wrong.Owner = widgetID("", "fresh")
	wrong.Owner.Uid = o.GetId().GetUid()
	_, err = h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{widget(t, "", "fresh", "v1"), wrong}})
	requireCode(t, err, codes.Aborted, "resources[1]: owner.uid", "resources[0]")
	h.requireUnchanged(before)

	// Without its uid, an owner must be a member.
	orphan := gizmo(t, "", "orphan")
	orphan.Owner = widgetID("", "owner")
	_, err = h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{widget(t, "", "other", "v1"), orphan}})
	requireCode(t, err, codes.InvalidArgument, "resources[1].owner.uid: is required")
	_, err = h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: orphan})
	requireCode(t, err, codes.InvalidArgument, "owner.uid: is required")

	// Members that own one another without uids cannot be ordered.
	a, b := widget(t, "", "a", "v1"), widget(t, "", "b", "v1")
	a.Owner, b.Owner = widgetID("", "b"), widgetID("", "a")
	_, err = h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{a, b}})
	requireCode(t, err, codes.InvalidArgument, "cycle")
	h.requireUnchanged(before)
}

// A namespace and what goes into it are created in one batch.
func TestWriteBatchCreatesNamespaceWithItsResources(t *testing.T) {
	h := newHarness(t)
	ns, err := core.NewNamespace("fresh", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{widget(t, "fresh", "w", "v1"), ns}}); err != nil {
		t.Fatalf("a namespace and a widget in it, in one batch: %v", err)
	}
	if h.stored(widgetID("fresh", "w")) == nil {
		t.Fatal("the widget was not stored")
	}
}

// The namespace a write goes into must exist when the write is applied,
// not only when it was checked: a namespace deleted in between refuses
// the write, which stores nothing.
func TestWriteIntoNamespaceDeletedMeanwhile(t *testing.T) {
	for _, batch := range []bool{false, true} {
		r := &racer{}
		h := newHarness(t, withBackend(func(b *inmem.Backend) storage.Backend { r.Backend = b; return r }))
		h.createNamespace("doomed")
		r.races = 1
		r.interfer = func() {
			if err := h.backend.DeleteCAS(context.Background(), core.NamespaceID("doomed"), ""); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if batch {
			_, err = h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{widget(t, "doomed", "a", "v1"), widget(t, "doomed", "b", "v1")}})
		} else {
			_, err = h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(t, "doomed", "a", "v1")})
		}
		requireCode(t, err, codes.FailedPrecondition, `namespace "doomed" does not exist`)
		if h.stored(widgetID("doomed", "a")) != nil {
			t.Fatalf("batch %v: a widget was stored in a namespace that is gone", batch)
		}
	}
}

// A type written only through its own operations refuses the generic
// writes, pointing at them; its operations (FromOperations) write it.
func TestWrittenThroughOperationsOnly(t *testing.T) {
	sealed := &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Sealed"}
	h := newHarness(t)
	reg := resource.NewRegistry()
	registerTestTypes(reg)
	reg.Register(resource.Registration{Type: sealed, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace, WrittenThrough: "/v1/sealed"})
	svc := resource.NewService(resource.Config{Backend: h.backend, Registry: reg})
	res := &pbresource.Resource{Id: &pbresource.ID{Type: sealed, Name: "s"}, Data: anyOf(t, wrapperspb.String("x"))}

	before := h.state()
	_, err := svc.Write(h.ctx, &pbresource.WriteRequest{Resource: res})
	requireCode(t, err, codes.FailedPrecondition, "demo/v1/Sealed is written only through its own operations (/v1/sealed)")
	_, err = svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{widget(t, "", "w", "v"), res}})
	requireCode(t, err, codes.FailedPrecondition, "resources[1]: demo/v1/Sealed is written only")
	h.requireUnchanged(before)

	out, err := svc.Write(resource.FromOperations(h.ctx), &pbresource.WriteRequest{Resource: res})
	if err != nil {
		t.Fatalf("a write from the type's operations: %v", err)
	}
	// Reads are the generic ones; deletes are its operations' too
	// (TestDeletedThroughOperationsOnly).
	if _, err := svc.Read(h.ctx, &pbresource.ReadRequest{Id: out.GetResource().GetId()}); err != nil {
		t.Fatalf("read: %v", err)
	}
}
