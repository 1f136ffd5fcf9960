package resource_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

func batchOf(t testing.TB, ns string, n int, value string) []*pbresource.Resource {
	out := make([]*pbresource.Resource, n)
	for i := range out {
		out[i] = widget(t, ns, fmt.Sprintf("task-%04d", i), value)
	}
	return out
}

func TestWriteBatchCreatesAtomically(t *testing.T) {
	h := newHarness(t)
	h.createNamespace("team-a")
	members := append(batchOf(t, "team-a", 50, "v1"), gadget(t, "g", 7))
	before := h.state()
	out, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: members})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.state().index; got != before.index+1 {
		t.Fatalf("index %d -> %d: a batch is one store change", before.index, got)
	}
	if len(out.GetResources()) != len(members) {
		t.Fatalf("%d resources back, want %d", len(out.GetResources()), len(members))
	}
	uids := map[string]bool{}
	for i, r := range out.GetResources() {
		if !ids.SameName(r.GetId(), members[i].GetId()) {
			t.Fatalf("result %d is %v, not in request order", i, r.GetId())
		}
		if r.GetGeneration() != 1 || r.GetId().GetUid() == "" || uids[r.GetId().GetUid()] {
			t.Fatalf("member %d: %v", i, r)
		}
		uids[r.GetId().GetUid()] = true
		if !proto.Equal(h.stored(r.GetId()), r) {
			t.Fatalf("member %d returned %v, stored %v", i, r, h.stored(r.GetId()))
		}
	}

	// Again, with one member changed: only that one is written, the others
	// come back as stored.
	again := batchOf(t, "team-a", 50, "v1")
	again[7] = widget(t, "team-a", "task-0007", "v2")
	before = h.state()
	out2, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: again})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out2.GetResources() {
		if i == 7 {
			if r.GetGeneration() != 2 || r.GetVersion() == out.GetResources()[7].GetVersion() {
				t.Fatalf("changed member: %v", r)
			}
			continue
		}
		if !proto.Equal(r, out.GetResources()[i]) {
			t.Fatalf("unchanged member %d was rewritten: %v", i, r)
		}
	}
	if got := h.state().index; got != before.index+1 {
		t.Fatalf("index %d -> %d", before.index, got)
	}

	// Entirely unchanged: nothing written.
	before = h.state()
	if _, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: again}); err != nil {
		t.Fatal(err)
	}
	h.requireUnchanged(before)
}

// TestWriteBatchRefusals: one bad member refuses the batch, names the
// member, and nothing of the batch is written.
func TestWriteBatchRefusals(t *testing.T) {
	h := newHarness(t)
	existing := h.write(widget(t, "", "task-0002", "v0"))
	tooMany := make([]*pbresource.Resource, resource.MaxBatchMembers+1)
	for i := range tooMany {
		tooMany[i] = &pbresource.Resource{}
	}
	big := make([]*pbresource.Resource, 9)
	for i := range big {
		big[i] = widget(t, "", fmt.Sprintf("big-%d", i), string(make([]byte, 1000*1000)))
	}

	cases := []struct {
		name    string
		members func() []*pbresource.Resource
		code    codes.Code
		want    []string
	}{
		{"empty", func() []*pbresource.Resource { return nil }, codes.InvalidArgument, []string{"resources: is empty"}},
		{"too many", func() []*pbresource.Resource { return tooMany }, codes.ResourceExhausted, []string{"resources: the batch has 5001 members, over the limit of 5000"}},
		{"too big", func() []*pbresource.Resource { return big }, codes.ResourceExhausted, []string{"resources: the batch is", "over the limit of 8388608 bytes"}},
		{"bad name", func() []*pbresource.Resource {
			m := batchOf(t, "", 5, "v1")
			m[3].Id.Name = "Foo_1"
			return m
		}, codes.InvalidArgument, []string{`resources[3].id.name: "Foo_1" is not a valid name`}},
		{"nil member", func() []*pbresource.Resource {
			m := batchOf(t, "", 5, "v1")
			m[1] = nil
			return m
		}, codes.InvalidArgument, []string{"resources[1]: a resource is required"}},
		{"bad data", func() []*pbresource.Resource {
			m := batchOf(t, "", 5, "v1")
			m[4].Data = anyOf(t, wrapperspb.Bool(true))
			return m
		}, codes.InvalidArgument, []string{"resources[4].data: has type"}},
		{"refused by Validate", func() []*pbresource.Resource {
			m := batchOf(t, "", 5, "v1")
			m[2] = widget(t, "", "x", "invalid")
			return m
		}, codes.InvalidArgument, []string{`resources[2].data.value: must not be "invalid"`}},
		{"missing namespace", func() []*pbresource.Resource {
			m := batchOf(t, "", 5, "v1")
			m[3].Id.Tenancy.Namespace = "nowhere"
			return m
		}, codes.FailedPrecondition, []string{`resources[3]: id.tenancy.namespace: namespace "nowhere" does not exist`}},
		{"duplicate", func() []*pbresource.Resource {
			m := batchOf(t, "", 5, "v1")
			m[4] = widget(t, "default", "task-0001", "other")
			return m
		}, codes.InvalidArgument, []string{"resources[4].id: names the same resource as resources[1]"}},
		{"duplicate via the default namespace", func() []*pbresource.Resource {
			m := batchOf(t, "default", 5, "v1")
			m[4] = widget(t, "", "task-0001", "other")
			return m
		}, codes.InvalidArgument, []string{"resources[4].id: names the same resource as resources[1]"}},
		{"stale member", func() []*pbresource.Resource {
			m := batchOf(t, "", 5, "v1")
			m[2].Version = "999"
			return m
		}, codes.Aborted, []string{"resources[2]: version: conflict: demo/v1/Widget/default/task-0002 is at version " + existing.GetVersion() + ", not 999"}},
		{"over 1 MiB member", func() []*pbresource.Resource {
			m := batchOf(t, "", 5, "v1")
			m[1] = widget(t, "", "huge", string(make([]byte, resource.MaxResourceSize)))
			return m
		}, codes.ResourceExhausted, []string{"resources[1]: resource is", "over the limit of 1048576 bytes"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.state()
			_, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: c.members()})
			requireCode(t, err, c.code, c.want...)
			h.requireUnchanged(before)
		})
	}
}

// TestWriteBatchConflict: a batch whose upsert member loses a race is
// retried as a whole; a CAS member that loses refuses the whole batch.
func TestWriteBatchConflict(t *testing.T) {
	r := &racer{}
	h := newHarness(t, withBackend(func(b *inmem.Backend) storage.Backend { r.Backend = b; return r }))
	h.write(widget(t, "", "task-0003", "v0"))
	r.interfer = func() {
		cur := h.stored(widgetID("default", "task-0003"))
		other := proto.Clone(cur).(*pbresource.Resource)
		other.Data = anyOf(t, wrapperspb.String("other"))
		if _, err := h.backend.WriteCAS(h.ctx, other); err != nil {
			t.Fatal(err)
		}
	}

	eventual := r.readCount(storage.EventualConsistency)
	strong := r.readCount(storage.StrongConsistency)
	r.races = 1
	out, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: batchOf(t, "", 10, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range out.GetResources() {
		if v, _ := resource.DecodeData[*wrapperspb.StringValue](res); v.GetValue() != "v1" || !proto.Equal(h.stored(res.GetId()), res) {
			t.Fatalf("member %d: %v", i, res)
		}
	}
	if got := r.readCount(storage.EventualConsistency) - eventual; got != 10 {
		t.Errorf("first pass: %d eventual reads, want one per member (10)", got)
	}
	if got := r.readCount(storage.StrongConsistency) - strong; got != 10 {
		t.Errorf("retry: %d strong reads, want one per member (10)", got)
	}

	// A CAS member that loses the race: the whole batch is refused, naming
	// it, and none of the other members is written.
	cur := h.stored(widgetID("default", "task-0003"))
	members := batchOf(t, "", 10, "v2")
	members[3].Version = cur.GetVersion()
	r.races = 1
	_, err = h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: members})
	requireCode(t, err, codes.Aborted, "resources[3]: version: conflict")
	for i, m := range members {
		if i == 3 {
			continue
		}
		if v, _ := resource.DecodeData[*wrapperspb.StringValue](h.stored(widgetID("default", m.GetId().GetName()))); v.GetValue() != "v1" {
			t.Fatalf("member %d was written: %q", i, v.GetValue())
		}
	}
}
