package controller_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// What is written through SeeingWrites is in the cache as the store
// answered it, filed and derived, before any watch; a deletion too (of
// the incarnation named), and a refused write changes nothing. Types not
// cached pass through.
func TestSeeingWrites(t *testing.T) {
	reg := resource.NewRegistry()
	for _, typ := range []*pbresource.Type{taskType, instanceType} {
		reg.Register(resource.Registration{Type: typ, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
	}
	api := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	c := newTaskCache(t)
	w := c.SeeingWrites(api)
	ctx := context.Background()
	data := func(v string) *anypb.Any {
		a, err := anypb.New(wrapperspb.String(v))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	one, err := w.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id(taskType, "a"), Data: data("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(c.ByIndex(taskType, "value", "x")); len(got) != 1 || got[0] != "a@"+one.GetResource().GetVersion() {
		t.Fatalf("after a Write the index holds %v", got)
	}
	batch, err := w.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{
		{Id: id(taskType, "b"), Data: data("y")},
		{Id: id(instanceType, "i1"), Data: data("x")}, // not cached
	}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := controller.DerivedOf[string](c.Get(id(taskType, "b")), tagged); v != "y@"+batch.GetResources()[0].GetVersion() {
		t.Fatalf("after a WriteBatch the derived value is %q", v)
	}
	// A refused write (a stale version) changes nothing.
	if _, err := w.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id(taskType, "a"), Version: "999999", Data: data("y")}}); status.Code(err) != codes.Aborted {
		t.Fatalf("a stale write: %v", err)
	}
	if got := names(c.ByIndex(taskType, "value", "y")); len(got) != 1 {
		t.Fatalf("after a refused write the index holds %v", got)
	}
	// A deletion without the uid is the watch's to bring; with it, at once.
	if _, err := w.Delete(ctx, &pbresource.DeleteRequest{Id: id(taskType, "b")}); err != nil {
		t.Fatal(err)
	}
	if c.Get(id(taskType, "b")) == nil {
		t.Fatal("a deletion naming no incarnation was applied")
	}
	if _, err := w.Delete(ctx, &pbresource.DeleteRequest{Id: one.GetResource().GetId()}); err != nil {
		t.Fatal(err)
	}
	if c.Get(id(taskType, "a")) != nil {
		t.Fatal("a deletion through SeeingWrites is not in the cache")
	}
	if err := c.Verify(); err != nil {
		t.Fatal(err)
	}
}
