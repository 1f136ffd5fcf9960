package resource_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

func next(t *testing.T, w storage.Watch) *pbresource.WatchEvent {
	t.Helper()
	ev, err := w.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestWatch(t *testing.T) {
	h := newHarness(t)
	a := h.write(widget(t, "", "a", "v1"))
	h.write(gizmo(t, "default", "a")) // another type: not seen

	w, err := h.svc.Watch(h.ctx, &pbresource.WatchListRequest{Type: widgetType})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if ev := next(t, w); ev.GetOp() != pbresource.WatchEvent_OP_UPSERT || !proto.Equal(ev.GetResource(), a) {
		t.Fatalf("snapshot: %v", ev)
	}
	end := next(t, w)
	if end.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
		t.Fatalf("want END_OF_SNAPSHOT, got %v", end)
	}

	b := h.write(widget(t, "", "b", "v1"))
	ev := next(t, w)
	if ev.GetOp() != pbresource.WatchEvent_OP_UPSERT || !proto.Equal(ev.GetResource(), b) || ev.GetIndex() <= end.GetIndex() {
		t.Fatalf("upsert event: %v", ev)
	}
	// The event is the caller's copy.
	ev.GetResource().Data = anyOf(t, wrapperspb.String("scribbled"))
	if !proto.Equal(h.stored(b.GetId()), b) {
		t.Fatal("changing an event changed the store")
	}
	h.write(widget(t, "", "a", "v1")) // a no-op write: no event
	if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: a.GetId()}); err != nil {
		t.Fatal(err)
	}
	del := next(t, w)
	if del.GetOp() != pbresource.WatchEvent_OP_DELETE || del.GetResource().GetId().GetName() != "a" {
		t.Fatalf("delete event: %v", del)
	}

	// Resume after the upsert of b: the delete is replayed.
	resumed, err := h.svc.Watch(h.ctx, &pbresource.WatchListRequest{Type: widgetType, SinceIndex: ev.GetIndex()})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if got := next(t, resumed); got.GetOp() != pbresource.WatchEvent_OP_DELETE || got.GetIndex() != del.GetIndex() {
		t.Fatalf("resumed: %v", got)
	}
	if got := next(t, resumed); got.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
		t.Fatalf("resumed: %v", got)
	}

	// Bad requests.
	_, err = h.svc.Watch(h.ctx, &pbresource.WatchListRequest{Type: &pbresource.Type{Group: "x", GroupVersion: "v1", Kind: "Y"}})
	requireCode(t, err, codes.InvalidArgument, `type: unknown resource type "x/v1/Y"`)
	_, err = h.svc.Watch(h.ctx, &pbresource.WatchListRequest{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "Bad"}})
	requireCode(t, err, codes.InvalidArgument, `tenancy.namespace: "Bad" is not a valid namespace`)

	// A closed watch ends with Canceled.
	w.Close()
	_, err = w.Next(context.Background())
	requireCode(t, err, codes.Canceled)
}

// TestWatchRelist: a watcher that falls behind, and a resume from an index
// no longer kept, both end with OutOfRange, which NeedsRelist recognizes.
func TestWatchRelist(t *testing.T) {
	h := newHarnessWith(t, inmem.NewBackend(inmem.WithWatcherBuffer(2), inmem.WithEventHistory(4)))
	first := h.write(widget(t, "", "w0", "v"))

	slow, err := h.svc.Watch(h.ctx, &pbresource.WatchListRequest{Type: widgetType})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	for i := 1; i <= 5; i++ {
		h.write(widget(t, "", fmt.Sprintf("w%d", i), "v"))
	}
	var lastErr error
	for range 10 {
		if _, lastErr = slow.Next(context.Background()); lastErr != nil {
			break
		}
	}
	requireCode(t, lastErr, codes.OutOfRange, "watch fell behind", "re-list")
	if !resource.NeedsRelist(lastErr) {
		t.Fatal("NeedsRelist is false for a watcher cut off")
	}

	_, err = h.svc.Watch(h.ctx, &pbresource.WatchListRequest{Type: widgetType, SinceIndex: mustIndex(t, first.GetVersion())})
	requireCode(t, err, codes.OutOfRange, "re-list")
	if !resource.NeedsRelist(err) {
		t.Fatal("NeedsRelist is false for an index too old")
	}
	if resource.NeedsRelist(nil) {
		t.Fatal("NeedsRelist(nil)")
	}
}

func mustIndex(t *testing.T, version string) uint64 {
	t.Helper()
	var idx uint64
	if _, err := fmt.Sscan(version, &idx); err != nil {
		t.Fatal(err)
	}
	return idx
}
