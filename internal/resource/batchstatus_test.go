package resource_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

// TestWriteBatchWithStatuses: a batch's status entries are stored with its
// resources in one storage batch, each as WriteStatus would store it
// (data and generation untouched), and come back in their order.
func TestWriteBatchWithStatuses(t *testing.T) {
	cb := &countingBatches{}
	h := newHarness(t, withBackend(func(b *inmem.Backend) storage.Backend { cb.Backend = b; return cb }))
	a := h.write(widget(t, "", "a", "v"))
	b := h.write(widget(t, "", "b", "v"))
	same := h.write(widget(t, "", "same", "v"))
	if _, err := h.svc.WriteStatus(h.ctx, progress(t, same.GetId(), "", 4)); err != nil {
		t.Fatal(err)
	}
	cb.batches = 0
	resp, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{widget(t, "", "c", "v")},
		Statuses: []*pbresource.WriteStatusRequest{
			progress(t, a.GetId(), a.GetVersion(), 1), // a CAS on the version read
			progress(t, b.GetId(), "", 2),
			progress(t, same.GetId(), "", 4), // already so: compared, not written
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cb.batches != 1 {
		t.Fatalf("%d storage batches, want 1", cb.batches)
	}
	if len(resp.GetResources()) != 1 || resp.GetResources()[0].GetId().GetName() != "c" {
		t.Fatalf("resources: %v", resp.GetResources())
	}
	if len(resp.GetStatuses()) != 3 {
		t.Fatalf("%d statuses for 3 entries", len(resp.GetStatuses()))
	}
	for i, want := range []int64{1, 2, 4} {
		got := resp.GetStatuses()[i]
		if progressOf(t, got) != want || got.GetGeneration() != 1 {
			t.Fatalf("entry %d: %v, want progress %d at generation 1", i, got, want)
		}
		if !proto.Equal(got, h.stored(got.GetId())) {
			t.Fatalf("entry %d's result is not what is stored", i)
		}
	}
}

// TestWriteBatchStatusRefusals: a status entry that is refused fails the
// whole batch, names the entry, and writes nothing of it.
func TestWriteBatchStatusRefusals(t *testing.T) {
	h := newHarness(t)
	a := h.write(widget(t, "", "a", "v"))
	h.write(widget(t, "", "b", "v"))
	c := widget(t, "", "c", "v")
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		resource *pbresource.Resource
		statuses []*pbresource.WriteStatusRequest
		code     codes.Code
		want     string
	}{
		{"a stale version", h.ctx, c, []*pbresource.WriteStatusRequest{progress(t, a.GetId(), "999", 1)}, codes.Aborted, "statuses[0]: version: conflict"},
		{"by another than the key's owner", context.Background(), c, []*pbresource.WriteStatusRequest{progress(t, a.GetId(), "", 1)}, codes.PermissionDenied, `statuses[0]: status key "progress"`},
		{"gone", h.ctx, c, []*pbresource.WriteStatusRequest{progress(t, widgetID("", "gone"), "", 1)}, codes.NotFound, "gone"},
		{"bad payload", h.ctx, c, []*pbresource.WriteStatusRequest{progress(t, a.GetId(), "", -1)}, codes.InvalidArgument, "statuses[0].status.data.value: must not be negative"},
		{"a version on an entry on a member", h.ctx, widget(t, "", "a", "w"), []*pbresource.WriteStatusRequest{progress(t, a.GetId(), a.GetVersion(), 1)}, codes.InvalidArgument, "statuses[0].version: must be empty: the entry names the resource resources[0] writes"},
		{"on a member, by another than the key's owner", context.Background(), widget(t, "", "n", "w"), []*pbresource.WriteStatusRequest{progress(t, widgetID("", "n"), "", 1)}, codes.PermissionDenied, `statuses[0]: status key "progress"`},
		{"on a member, ahead of its generation", h.ctx, widget(t, "", "n", "w"), []*pbresource.WriteStatusRequest{observing(progress(t, widgetID("", "n"), "", 1), 2)}, codes.InvalidArgument, "statuses[0].status.observed_generation: 2 is ahead of the resource's generation 1"},
		{"one resource twice", h.ctx, c, []*pbresource.WriteStatusRequest{progress(t, a.GetId(), "", 1), progress(t, a.GetId(), "", 2)}, codes.InvalidArgument, "statuses[1].id: names the same resource as statuses[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.state()
			_, err := h.svc.WriteBatch(tc.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{tc.resource}, Statuses: tc.statuses})
			requireCode(t, err, tc.code, tc.want)
			h.requireUnchanged(before)
		})
	}
}

// TestWriteBatchStatusesRetryConflicts: a batch that loses a race with a
// writer of an entry's resource is planned again on what is stored: an
// entry without a version is written onto the other write; one with a
// version fails the batch as stale.
func TestWriteBatchStatusesRetryConflicts(t *testing.T) {
	r := &racer{}
	h := newHarness(t, withBackend(func(b *inmem.Backend) storage.Backend { r.Backend = b; return r }))
	a := h.write(widget(t, "", "a", "v"))
	touch := func() {
		cur := proto.Clone(h.stored(a.GetId())).(*pbresource.Resource)
		cur.Metadata = map[string]string{"touched": "yes"}
		cur.Generation++
		if _, err := h.backend.WriteCAS(context.Background(), cur); err != nil {
			t.Fatal(err)
		}
	}
	r.interfer, r.races = touch, 1
	resp, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{widget(t, "", "c", "v")},
		Statuses: []*pbresource.WriteStatusRequest{progress(t, a.GetId(), "", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetStatuses()[0]; progressOf(t, got) != 1 || got.GetMetadata()["touched"] != "yes" {
		t.Fatalf("the entry was not written onto the other write: %v", got)
	}

	a = h.stored(a.GetId())
	r.interfer, r.races = touch, 1
	_, err = h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{widget(t, "", "d", "v")},
		Statuses: []*pbresource.WriteStatusRequest{progress(t, a.GetId(), a.GetVersion(), 2)}})
	requireCode(t, err, codes.Aborted, "version: conflict")
	if h.stored(widgetID("", "d")) != nil {
		t.Fatal("the batch's resource was written without its stale entry")
	}
}

// observing sets the observed generation of a status entry.
func observing(e *pbresource.WriteStatusRequest, generation uint64) *pbresource.WriteStatusRequest {
	e.Status.ObservedGeneration = generation
	return e
}

// TestWriteBatchStatusOnMember: a status entry on a resource the batch
// writes is written with it, in the same storage write: a resource is
// created with its status, an update carries it, and a member that
// changes nothing is written for its status alone, under its version.
func TestWriteBatchStatusOnMember(t *testing.T) {
	cb := &countingBatches{}
	h := newHarness(t, withBackend(func(b *inmem.Backend) storage.Backend { cb.Backend = b; return cb }))
	for _, step := range []struct {
		name       string
		value      string
		progress   int64
		generation uint64
	}{
		{"created with its status", "v", 1, 1},
		{"updated with its status", "w", 2, 2},
		{"the status alone", "w", 3, 2},
	} {
		cb.batches = 0
		resp, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{
			Resources: []*pbresource.Resource{widget(t, "", "n", step.value)},
			Statuses:  []*pbresource.WriteStatusRequest{observing(progress(t, widgetID("", "n"), "", step.progress), step.generation)},
		})
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if cb.batches != 1 {
			t.Fatalf("%s: %d storage batches, want 1", step.name, cb.batches)
		}
		stored := h.stored(resp.GetResources()[0].GetId())
		if progressOf(t, stored) != step.progress || stored.GetGeneration() != step.generation {
			t.Fatalf("%s: stored %v, want progress %d at generation %d", step.name, stored, step.progress, step.generation)
		}
		if !proto.Equal(resp.GetResources()[0], stored) || !proto.Equal(resp.GetStatuses()[0], stored) {
			t.Fatalf("%s: the results are not what is stored", step.name)
		}
	}
}
