package resource_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

func progress(t testing.TB, id *pbresource.ID, version string, v int64) *pbresource.WriteStatusRequest {
	return &pbresource.WriteStatusRequest{Id: id, Version: version, Key: "progress", Status: &pbresource.Status{ObservedGeneration: 1, Data: anyOf(t, wrapperspb.Int64(v))}}
}

func progressOf(t testing.TB, res *pbresource.Resource) int64 {
	t.Helper()
	v := &wrapperspb.Int64Value{}
	if err := res.GetStatus()["progress"].GetData().UnmarshalTo(v); err != nil {
		t.Fatalf("%s has no progress: %v", res.GetId().GetName(), err)
	}
	return v.GetValue()
}

// countingBatches is the store, counting the service's WriteBatch calls.
type countingBatches struct {
	*inmem.Backend
	batches int
}

func (c *countingBatches) WriteBatch(ctx context.Context, res []*pbresource.Resource, compares ...*pbresource.Compare) ([]*pbresource.Resource, error) {
	c.batches++
	return c.Backend.WriteBatch(ctx, res, compares...)
}

// TestWriteStatuses: what a member meets in the store (its resource gone,
// a stale version, a generation not reached) fails that member alone; the
// others are written together, in one storage batch.
func TestWriteStatuses(t *testing.T) {
	cb := &countingBatches{}
	h := newHarness(t, withBackend(func(b *inmem.Backend) storage.Backend { cb.Backend = b; return cb }))
	a := h.write(widget(t, "", "a", "v"))
	b := h.write(widget(t, "", "b", "v"))
	h.write(widget(t, "", "c", "v"))
	same := h.write(widget(t, "", "same", "v"))
	if _, err := h.svc.WriteStatus(h.ctx, progress(t, same.GetId(), "", 4)); err != nil {
		t.Fatal(err)
	}
	tooNew := progress(t, widgetID("", "c"), "", 1)
	tooNew.Status.ObservedGeneration = 2

	resp, err := h.svc.WriteStatuses(h.ctx, &pbresource.WriteStatusesRequest{Statuses: []*pbresource.WriteStatusRequest{
		progress(t, a.GetId(), a.GetVersion(), 1),   // a CAS on the current version
		progress(t, widgetID("", "gone"), "", 2),    // nothing stored
		progress(t, b.GetId(), "1", 3),              // a stale version
		progress(t, widgetID("", "same"), "", 4),    // already so
		tooNew,                                      // a generation c has not reached
		progress(t, widgetID("", "b-blind"), "", 5), // nothing stored either
	}})
	if err != nil {
		t.Fatal(err)
	}
	results := resp.GetResults()
	if len(results) != 6 {
		t.Fatalf("%d results for 6 members", len(results))
	}
	if res, err := resource.StatusResult(results[0]); err != nil || progressOf(t, res) != 1 || res.GetVersion() == a.GetVersion() {
		t.Fatalf("member 0: %v, %v", res, err)
	}
	if !proto.Equal(h.stored(a.GetId()), mustResult(t, results[0])) {
		t.Fatal("member 0's result is not what is stored")
	}
	for i, want := range map[int]struct {
		code codes.Code
		msg  string
	}{
		1: {codes.NotFound, "demo/v1/Widget/default/gone: resource not found"},
		2: {codes.Aborted, "version: conflict"},
		4: {codes.InvalidArgument, "status.observed_generation: 2 is ahead of the resource's generation 1"},
		5: {codes.NotFound, "b-blind"},
	} {
		_, err := resource.StatusResult(results[i])
		requireCode(t, err, want.code, want.msg)
	}
	if res, err := resource.StatusResult(results[3]); err != nil || res.GetVersion() == "" {
		t.Fatalf("member 3 (already so): %v, %v", res, err)
	}
	if got := h.stored(b.GetId()); len(got.GetStatus()) != 0 {
		t.Fatalf("the stale member was written: %v", got.GetStatus())
	}
	if cb.batches != 1 {
		t.Fatalf("%d storage batches, want 1", cb.batches)
	}
}

func mustResult(t testing.TB, r *pbresource.WriteStatusResult) *pbresource.Resource {
	t.Helper()
	res, err := resource.StatusResult(r)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestWriteStatusesRefusals: bad input in any member, and a refusal of
// the ACL hook, fail the whole request, name the member, and write
// nothing.
func TestWriteStatusesRefusals(t *testing.T) {
	p := &policy{deny: map[string]bool{}}
	h := newHarness(t, withAuthorize(func(context.Context) (acl.Authorizer, error) { return p, nil }))
	h.createNamespace("secret")
	a := h.write(widget(t, "", "a", "v"))
	h.write(widget(t, "secret", "s", "v"))
	p.deny["secret"] = true
	ok := progress(t, a.GetId(), "", 1)
	many := make([]*pbresource.WriteStatusRequest, resource.MaxBatchMembers+1)
	for i := range many {
		many[i] = progress(t, widgetID("", fmt.Sprintf("w%d", i)), "", 1)
	}
	cases := []struct {
		name    string
		members []*pbresource.WriteStatusRequest
		code    codes.Code
		want    string
		follows map[uint32]uint32
	}{
		{"empty", nil, codes.InvalidArgument, "statuses: is empty", nil},
		{"too many", many, codes.ResourceExhausted, fmt.Sprintf("over the limit of %d", resource.MaxBatchMembers), nil},
		{"nil member", []*pbresource.WriteStatusRequest{ok, nil}, codes.InvalidArgument, "statuses[1].id: is required", nil},
		{"bad payload", []*pbresource.WriteStatusRequest{ok, progress(t, widgetID("", "b"), "", -3)}, codes.InvalidArgument, "statuses[1].status.data.value: must not be negative", nil},
		{"undeclared key", []*pbresource.WriteStatusRequest{ok, {Id: a.GetId(), Key: "health", Status: &pbresource.Status{Data: anyOf(t, wrapperspb.Int64(1))}}}, codes.InvalidArgument, `statuses[1].status.data: status key "health"`, nil},
		{"one resource twice", []*pbresource.WriteStatusRequest{ok, {Id: widgetID("default", "a"), Key: "other", Status: &pbresource.Status{}}}, codes.InvalidArgument, "statuses[1].id: names the same resource as statuses[0]", nil},
		{"denied", []*pbresource.WriteStatusRequest{ok, progress(t, widgetID("secret", "s"), "", 1)}, codes.PermissionDenied, "statuses[1]: ", nil},
		{"follows a later member", []*pbresource.WriteStatusRequest{ok, progress(t, widgetID("", "b"), "", 1)}, codes.InvalidArgument, "follows[0]: is 1: a member follows an earlier member", map[uint32]uint32{0: 1}},
		{"follows itself", []*pbresource.WriteStatusRequest{ok, progress(t, widgetID("", "b"), "", 1)}, codes.InvalidArgument, "follows[1]: is 1", map[uint32]uint32{1: 1}},
		{"follows from past the end", []*pbresource.WriteStatusRequest{ok}, codes.InvalidArgument, "follows[3]: names member 3, but the request has 1", map[uint32]uint32{3: 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.state()
			_, err := h.svc.WriteStatuses(h.ctx, &pbresource.WriteStatusesRequest{Statuses: c.members, Follows: c.follows})
			requireCode(t, err, c.code, c.want)
			h.requireUnchanged(before)
		})
	}
}

// TestWriteStatusesRetriesConflicts: a batch that loses a race with a
// writer of one member's resource is planned again on what is now stored:
// the members without a version are written, the one with a version fails
// alone as stale.
func TestWriteStatusesRetriesConflicts(t *testing.T) {
	r := &racer{}
	h := newHarness(t, withBackend(func(b *inmem.Backend) storage.Backend { r.Backend = b; return r }))
	a := h.write(widget(t, "", "a", "v"))
	b := h.write(widget(t, "", "b", "v"))
	c := h.write(widget(t, "", "c", "v"))
	r.interfer = func() {
		// A user changes a's data and b's metadata meanwhile.
		for _, id := range []*pbresource.ID{a.GetId(), b.GetId()} {
			cur := proto.Clone(h.stored(id)).(*pbresource.Resource)
			cur.Metadata = map[string]string{"touched": "yes"}
			cur.Generation++
			if _, err := h.backend.WriteCAS(context.Background(), cur); err != nil {
				t.Fatal(err)
			}
		}
	}
	r.races = 1
	resp, err := h.svc.WriteStatuses(h.ctx, &pbresource.WriteStatusesRequest{Statuses: []*pbresource.WriteStatusRequest{
		progress(t, a.GetId(), "", 1),
		progress(t, b.GetId(), b.GetVersion(), 2),
		progress(t, c.GetId(), c.GetVersion(), 3),
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := mustResult(t, resp.GetResults()[0])
	if progressOf(t, got) != 1 || got.GetMetadata()["touched"] != "yes" || got.GetGeneration() != 2 {
		t.Fatalf("member 0 was not written onto the other write: %v", got)
	}
	_, err = resource.StatusResult(resp.GetResults()[1])
	requireCode(t, err, codes.Aborted, "version: conflict")
	if progressOf(t, mustResult(t, resp.GetResults()[2])) != 3 {
		t.Fatal("member 2, untouched by the race, was not written")
	}
}

// TestWriteStatusesFollows: a member that follows another is stored only
// with it: when its predecessor fails, so does it, and nothing of it is
// written; when both are fine, both are stored in one batch.
func TestWriteStatusesFollows(t *testing.T) {
	cb := &countingBatches{}
	h := newHarness(t, withBackend(func(b *inmem.Backend) storage.Backend { cb.Backend = b; return cb }))
	old := h.write(widget(t, "", "old", "v"))
	next := h.write(widget(t, "", "next", "v"))
	other := h.write(widget(t, "", "other", "v"))
	if _, err := h.svc.WriteStatus(h.ctx, progress(t, old.GetId(), "", 9)); err != nil {
		t.Fatal(err)
	}

	resp, err := h.svc.WriteStatuses(h.ctx, &pbresource.WriteStatusesRequest{
		Statuses: []*pbresource.WriteStatusRequest{
			progress(t, old.GetId(), old.GetVersion(), 1), // stale: not stored
			progress(t, next.GetId(), "", 2),              // follows it: not stored either
			progress(t, other.GetId(), "", 3),
		},
		Follows: map[uint32]uint32{1: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = resource.StatusResult(resp.GetResults()[1])
	requireCode(t, err, codes.Aborted, "follows statuses[0], which was not stored")
	if got := h.stored(next.GetId()); len(got.GetStatus()) != 0 {
		t.Fatalf("the member whose predecessor failed was written: %v", got.GetStatus())
	}
	if progressOf(t, mustResult(t, resp.GetResults()[2])) != 3 {
		t.Fatal("the independent member was not written")
	}

	cb.batches = 0
	resp, err = h.svc.WriteStatuses(h.ctx, &pbresource.WriteStatusesRequest{
		Statuses: []*pbresource.WriteStatusRequest{progress(t, old.GetId(), "", 1), progress(t, next.GetId(), "", 2)},
		Follows:  map[uint32]uint32{1: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	if progressOf(t, mustResult(t, resp.GetResults()[0])) != 1 || progressOf(t, mustResult(t, resp.GetResults()[1])) != 2 {
		t.Fatal("a member and the one it follows were not both written")
	}
	if cb.batches != 1 {
		t.Fatalf("%d storage batches, want 1", cb.batches)
	}
}
