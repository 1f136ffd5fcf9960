package resource_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

// TestWriteRefusals: every bad request is refused with a code and a
// message naming the field, and nothing is written.
func TestWriteRefusals(t *testing.T) {
	h := newHarness(t)
	h.createNamespace("team-a")
	owner := h.write(gadget(t, "owner", 1))
	existing := h.write(widget(t, "default", "owned", "x"))
	_ = existing

	huge := strings.Repeat("x", resource.MaxResourceSize)
	many := map[string]string{}
	for i := range resource.MaxMetadataEntries + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	cases := []struct {
		name string
		res  func() *pbresource.Resource
		code codes.Code
		want []string
	}{
		{"no resource", func() *pbresource.Resource { return nil }, codes.InvalidArgument, []string{"a resource is required"}},
		{"no id", func() *pbresource.Resource { return &pbresource.Resource{Data: anyOf(t, wrapperspb.String("x"))} }, codes.InvalidArgument, []string{"id: is required"}},
		{"no type", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Id.Type = nil
			return r
		}, codes.InvalidArgument, []string{"id.type: is required"}},
		{"unknown type", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Id.Type = &pbresource.Type{Group: "demo", GroupVersion: "v9", Kind: "Widget"}
			return r
		}, codes.InvalidArgument, []string{"id.type", `unknown resource type "demo/v9/Widget"`}},
		{"bad name", func() *pbresource.Resource { return widget(t, "", "Foo_1", "x") }, codes.InvalidArgument,
			[]string{`id.name: "Foo_1" is not a valid name: must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)`}},
		{"long name", func() *pbresource.Resource { return widget(t, "", strings.Repeat("a", 64), "x") }, codes.InvalidArgument, []string{"id.name:", "at most 63 characters"}},
		{"no name", func() *pbresource.Resource { return widget(t, "", "", "x") }, codes.InvalidArgument, []string{"id.name: is required"}},
		{"bad namespace", func() *pbresource.Resource { return widget(t, "Team_A", "w", "x") }, codes.InvalidArgument, []string{`id.tenancy.namespace: "Team_A" is not a valid namespace`}},
		{"missing namespace", func() *pbresource.Resource { return widget(t, "team-b", "w", "x") }, codes.FailedPrecondition, []string{`id.tenancy.namespace: namespace "team-b" does not exist`}},
		{"cluster-scoped with namespace", func() *pbresource.Resource {
			r := gadget(t, "g", 1)
			r.Id.Tenancy = &pbresource.Tenancy{Namespace: "default"}
			return r
		}, codes.InvalidArgument, []string{"id.tenancy.namespace: must be empty: demo/v1/Gadget is cluster-scoped"}},
		{"no data", func() *pbresource.Resource { return &pbresource.Resource{Id: widgetID("", "w")} }, codes.InvalidArgument, []string{"data: is required: a google.protobuf.StringValue"}},
		{"data of another type", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Data = anyOf(t, wrapperspb.Int64(3))
			return r
		}, codes.InvalidArgument, []string{`data: has type "type.googleapis.com/google.protobuf.Int64Value" but demo/v1/Widget holds google.protobuf.StringValue`}},
		{"data that does not decode", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Data = &anypb.Any{TypeUrl: r.Data.TypeUrl, Value: []byte{0x0a, 0x05, 'a'}}
			return r
		}, codes.InvalidArgument, []string{"data: does not decode as google.protobuf.StringValue"}},
		{"bad metadata key", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Metadata = map[string]string{"app/../x": "y"}
			return r
		}, codes.InvalidArgument, []string{`metadata["app/../x"]: key is not valid`}},
		{"too much metadata", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Metadata = many
			return r
		}, codes.InvalidArgument, []string{"metadata: has 129 entries, over the limit of 128"}},
		{"owner without uid", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Owner = &pbresource.ID{Type: gadgetType, Name: "owner"}
			return r
		}, codes.InvalidArgument, []string{"owner.uid: is required"}},
		{"owner of an unknown type", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Owner = &pbresource.ID{Type: &pbresource.Type{Group: "x", GroupVersion: "v1", Kind: "Y"}, Name: "o", Uid: "U"}
			return r
		}, codes.InvalidArgument, []string{`owner.type: unknown resource type "x/v1/Y"`}},
		{"owner with a bad name", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Owner = &pbresource.ID{Type: gadgetType, Name: "Owner", Uid: owner.GetId().GetUid()}
			return r
		}, codes.InvalidArgument, []string{`owner.name: "Owner" is not a valid name`}},
		{"owns itself", func() *pbresource.Resource {
			r := widget(t, "", "w", "x")
			r.Owner = &pbresource.ID{Type: widgetType, Name: "w", Uid: "U"}
			return r
		}, codes.InvalidArgument, []string{"owner: a resource cannot own itself"}},
		{"over 1 MiB", func() *pbresource.Resource { return widget(t, "", "w", huge) }, codes.ResourceExhausted, []string{"bytes encoded, over the limit of 1048576 bytes"}},
		{"refused by Validate", func() *pbresource.Resource { return widget(t, "", "w", "invalid") }, codes.InvalidArgument, []string{`data.value: must not be "invalid"`}},
		{"namespace description too long", func() *pbresource.Resource {
			r, _ := core.NewNamespace("team-c", strings.Repeat("d", 1025))
			return r
		}, codes.InvalidArgument, []string{"data.description: is 1025 characters long, over the limit of 1024"}},
		{"stale version", func() *pbresource.Resource {
			r := widget(t, "", "owned", "y")
			r.Version = "1"
			return r
		}, codes.Aborted, []string{"version: conflict", "re-read it and retry"}},
		{"owner change", func() *pbresource.Resource {
			r := widget(t, "", "owned", "y")
			r.Owner = owner.GetId()
			return r
		}, codes.InvalidArgument, []string{"owner: cannot change once demo/v1/Widget/default/owned is created"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := h.state()
			_, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: c.res()})
			requireCode(t, err, c.code, c.want...)
			h.requireUnchanged(before)
		})
	}
}

func TestWriteCreateUpdateNoop(t *testing.T) {
	h := newHarness(t)
	in := widget(t, "", "web", "v1")
	in.Metadata = map[string]string{"app": "web"}
	in.Status = map[string]*pbresource.Status{"forged": {}}
	in.Generation = 42

	created := h.write(in)
	if created.GetId().GetTenancy().GetNamespace() != "default" {
		t.Fatalf("namespace %q, want default", created.GetId().GetTenancy().GetNamespace())
	}
	uid, err := ulid.ParseStrict(created.GetId().GetUid())
	if err != nil {
		t.Fatalf("uid %q is not a ULID: %v", created.GetId().GetUid(), err)
	}
	if uid.Time() != ulid.Timestamp(h.clock) {
		t.Errorf("uid timestamp %d, want the injected clock's %d", uid.Time(), ulid.Timestamp(h.clock))
	}
	if created.GetGeneration() != 1 || created.GetVersion() == "" || len(created.GetStatus()) != 0 {
		t.Fatalf("created %v: want generation 1, a version, no status", created)
	}

	// The same content again: nothing written, the stored copy returned.
	again := h.write(widget(t, "", "web", "v1"))
	if again.GetVersion() == created.GetVersion() {
		t.Fatal("a write without the metadata is a change, but the version did not move")
	}
	before := h.state()
	same := widget(t, "", "web", "v1")
	noop := h.write(same)
	h.requireUnchanged(before)
	if !proto.Equal(noop, again) {
		t.Fatalf("no-op write returned %v, want the stored %v", noop, again)
	}

	// Status set by WriteStatus survives a data change; generation moves.
	st, err := h.svc.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: noop.GetId(), Key: "ctrl", Status: &pbresource.Status{ObservedGeneration: noop.GetGeneration()}})
	if err != nil {
		t.Fatal(err)
	}
	updated := h.write(widget(t, "", "web", "v2"))
	if updated.GetGeneration() != noop.GetGeneration()+1 {
		t.Errorf("generation %d after a data change, want %d", updated.GetGeneration(), noop.GetGeneration()+1)
	}
	if updated.GetId().GetUid() != created.GetId().GetUid() {
		t.Error("uid changed on update")
	}
	if !proto.Equal(updated.GetStatus()["ctrl"], st.GetResource().GetStatus()["ctrl"]) {
		t.Errorf("status not carried over: %v", updated.GetStatus())
	}
	// A status change alone does not bump the generation either.
	if st.GetResource().GetGeneration() != noop.GetGeneration() {
		t.Error("WriteStatus changed the generation")
	}

	// A write that carries a status cannot change it.
	forged := widget(t, "", "web", "v2")
	forged.Status = map[string]*pbresource.Status{"ctrl": {ObservedGeneration: 99}}
	before = h.state()
	if got := h.write(forged); got.GetStatus()["ctrl"].GetObservedGeneration() == 99 {
		t.Fatal("Write changed the status")
	}
	h.requireUnchanged(before)

	// The Mutate hook ran: an empty value is stored as "unnamed".
	m := h.write(widget(t, "", "blank", ""))
	v, err := resource.DecodeData[*wrapperspb.StringValue](m)
	if err != nil || v.GetValue() != "unnamed" {
		t.Fatalf("mutated data %v, %v", v, err)
	}
}

func TestWriteCAS(t *testing.T) {
	h := newHarness(t)
	v1 := h.write(widget(t, "", "web", "v1"))

	next := widget(t, "", "web", "v2")
	next.Version = v1.GetVersion()
	v2 := h.write(next)
	if v2.GetVersion() == v1.GetVersion() || v2.GetGeneration() != 2 {
		t.Fatalf("CAS write: %v", v2)
	}

	stale := widget(t, "", "web", "v3")
	stale.Version = v1.GetVersion()
	before := h.state()
	_, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: stale})
	requireCode(t, err, codes.Aborted, "version: conflict", "is at version "+v2.GetVersion()+", not "+v1.GetVersion(), "re-read it and retry")
	h.requireUnchanged(before)

	// A CAS write of what is stored, at the stored version, writes nothing.
	same := widget(t, "", "web", "v2")
	same.Version = v2.GetVersion()
	if got := h.write(same); got.GetVersion() != v2.GetVersion() {
		t.Fatal("identical CAS write bumped the version")
	}
	h.requireUnchanged(before)

	// A version for something that does not exist is a conflict.
	ghost := widget(t, "", "ghost", "v1")
	ghost.Version = "5"
	_, err = h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: ghost})
	requireCode(t, err, codes.Aborted, "does not exist")
	h.requireUnchanged(before)
}

func TestWriteUID(t *testing.T) {
	h := newHarness(t)
	first := h.write(widget(t, "", "web", "v1"))

	// Naming the right uid works.
	same := widget(t, "", "web", "v2")
	same.Id.Uid = first.GetId().GetUid()
	h.write(same)

	// Re-create: a new uid; the old one is refused afterwards.
	if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: first.GetId()}); err != nil {
		t.Fatal(err)
	}
	second := h.write(widget(t, "", "web", "v1"))
	if second.GetId().GetUid() == first.GetId().GetUid() {
		t.Fatal("re-created resource kept its uid")
	}
	if second.GetGeneration() != 1 {
		t.Fatalf("re-created generation %d, want 1", second.GetGeneration())
	}
	old := widget(t, "", "web", "v3")
	old.Id.Uid = first.GetId().GetUid()
	before := h.state()
	_, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: old})
	requireCode(t, err, codes.Aborted, "id.uid", "not "+first.GetId().GetUid(), "deleted and re-created")
	h.requireUnchanged(before)

	// A uid for something that is not stored at all is refused too.
	gone := widget(t, "", "gone", "v1")
	gone.Id.Uid = first.GetId().GetUid()
	_, err = h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: gone})
	requireCode(t, err, codes.Aborted, "no longer exists")
	h.requireUnchanged(before)
}

func TestWriteOwner(t *testing.T) {
	h := newHarness(t)
	owner := h.write(gadget(t, "owner", 1))
	child := widget(t, "", "child", "v1")
	child.Owner = &pbresource.ID{Type: gadgetType, Name: "owner", Uid: owner.GetId().GetUid()}
	stored := h.write(child)
	if !proto.Equal(stored.GetOwner(), owner.GetId()) {
		t.Fatalf("owner %v, want %v", stored.GetOwner(), owner.GetId())
	}
	// Updating with the same owner is fine; dropping it is not.
	again := widget(t, "", "child", "v2")
	again.Owner = owner.GetId()
	h.write(again)
	before := h.state()
	_, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(t, "", "child", "v3")})
	requireCode(t, err, codes.InvalidArgument, "owner: cannot change")
	h.requireUnchanged(before)
}

// racer is the storage boundary with one scripted interleaving: before the
// service's n-th WriteCAS or WriteBatch reaches the store, another writer
// changes the resource the service is writing. It also counts reads by
// consistency.
type racer struct {
	*inmem.Backend
	interfer func() // the competing write, run before the write it races
	races    int    // how many of the service's writes to race

	mu    sync.Mutex
	reads map[storage.ReadConsistency]int
}

func (r *racer) Read(ctx context.Context, c storage.ReadConsistency, id *pbresource.ID) (*pbresource.Resource, error) {
	r.mu.Lock()
	if r.reads == nil {
		r.reads = map[storage.ReadConsistency]int{}
	}
	r.reads[c]++
	r.mu.Unlock()
	return r.Backend.Read(ctx, c, id)
}

func (r *racer) race() {
	r.mu.Lock()
	run := r.races > 0
	r.races--
	r.mu.Unlock()
	if run {
		r.interfer()
	}
}

func (r *racer) WriteCAS(ctx context.Context, res *pbresource.Resource) (*pbresource.Resource, error) {
	r.race()
	return r.Backend.WriteCAS(ctx, res)
}

func (r *racer) WriteBatch(ctx context.Context, res []*pbresource.Resource, compares ...*pbresource.Compare) ([]*pbresource.Resource, error) {
	r.race()
	return r.Backend.WriteBatch(ctx, res, compares...)
}

func (r *racer) readCount(c storage.ReadConsistency) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads[c]
}

// TestUpsertRetriesOnConflict: a blind upsert that loses the CAS race reads
// again with strong consistency and succeeds on top of the other write.
func TestUpsertRetriesOnConflict(t *testing.T) {
	r := &racer{}
	h := newHarness(t, withBackend(func(b *inmem.Backend) storage.Backend { r.Backend = b; return r }))
	h.write(widget(t, "", "web", "v1"))
	n := 0
	r.interfer = func() {
		n++
		cur := h.stored(widgetID("default", "web"))
		other := proto.Clone(cur).(*pbresource.Resource)
		other.Data = anyOf(t, wrapperspb.String(fmt.Sprintf("other-%d", n)))
		if _, err := h.backend.WriteCAS(context.Background(), other); err != nil {
			t.Fatal(err)
		}
	}
	r.races = 3
	strongBefore := r.readCount(storage.StrongConsistency)
	out := h.write(widget(t, "", "web", "mine"))
	if n != 3 {
		t.Fatalf("%d competing writes, want 3", n)
	}
	if v, _ := resource.DecodeData[*wrapperspb.StringValue](out); v.GetValue() != "mine" {
		t.Fatalf("stored %q, want mine", v.GetValue())
	}
	if got := r.readCount(storage.StrongConsistency) - strongBefore; got != 3 {
		t.Errorf("%d strong reads, want one per retry (3)", got)
	}
	if stored := h.stored(widgetID("default", "web")); stored.GetVersion() != out.GetVersion() {
		t.Error("returned version is not the stored one")
	}

	// A CAS write that loses the race is not retried: it is stale.
	cur := h.stored(widgetID("default", "web"))
	r.races = 1
	cas := widget(t, "", "web", "cas")
	cas.Version = cur.GetVersion()
	_, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: cas})
	requireCode(t, err, codes.Aborted, "version: conflict")

	// An upsert that loses every race gives up with Aborted.
	r.races = 1000
	_, err = h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(t, "", "web", "never")})
	requireCode(t, err, codes.Aborted, "gave up after", "retry")
}

// TestConcurrentUpserts: writers racing on one resource each get success
// or a retryable Aborted, and every success is a distinct generation.
func TestConcurrentUpserts(t *testing.T) {
	h := newHarness(t)
	const writers, each = 4, 25
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		gens = map[uint64]bool{}
		ok   int
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				out, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(t, "", "hot", fmt.Sprintf("%d-%d", w, i))})
				if err != nil {
					if status.Code(err) != codes.Aborted {
						t.Errorf("concurrent upsert: %v", err)
					}
					continue
				}
				mu.Lock()
				if gens[out.GetResource().GetGeneration()] {
					t.Errorf("generation %d returned twice", out.GetResource().GetGeneration())
				}
				gens[out.GetResource().GetGeneration()] = true
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if got := h.stored(widgetID("default", "hot")).GetGeneration(); got != uint64(ok) {
		t.Fatalf("final generation %d, want one per successful write (%d)", got, ok)
	}
}

func TestNamespaceData(t *testing.T) {
	h := newHarness(t)
	ns := h.createNamespace("team-a")
	got, err := resource.DecodeData[*pbcore.Namespace](ns)
	if err != nil || got.GetDescription() != "" {
		t.Fatalf("%v %v", got, err)
	}
	if ns.GetId().GetTenancy().GetNamespace() != "" {
		t.Fatal("a Namespace has no namespace")
	}
}

func TestWriteCreateOnly(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	w := widget(t, "", "once", "first")
	w.Version = resource.CreateOnly
	got, err := h.svc.Write(ctx, &pbresource.WriteRequest{Resource: w})
	if err != nil {
		t.Fatalf("create only, absent: %v", err)
	}
	again := widget(t, "", "once", "second")
	again.Version = resource.CreateOnly
	_, err = h.svc.Write(ctx, &pbresource.WriteRequest{Resource: again})
	requireCode(t, err, codes.Aborted, "already exists (version 0 was given: create only)")
	read, err := h.svc.Read(ctx, &pbresource.ReadRequest{Id: got.GetResource().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if read.GetResource().GetVersion() != got.GetResource().GetVersion() {
		t.Fatalf("the refused create wrote: version %s, want %s", read.GetResource().GetVersion(), got.GetResource().GetVersion())
	}
}
