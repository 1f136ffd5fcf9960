package fanout

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/testlog"
)

// itemType is a tiny type for the tests: its data is the key it belongs
// to ("" for none).
var itemType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Item"}

// keyOfItem is the tests' Config.Key.
func keyOfItem(res *pbresource.Resource) (string, bool) {
	v, err := resource.DecodeData[*wrapperspb.StringValue](res)
	if err != nil || v.GetValue() == "" {
		return "", false
	}
	return v.GetValue(), true
}

// echoed is the tests' Config.Suppress: an update labelled echo=yes is one
// its subscribers already have.
func echoed(_, next *pbresource.Resource) bool { return next.GetMetadata()["echo"] == "yes" }

// harness is a Fanout over the real resource service on an in-memory
// store.
type harness struct {
	t   *testing.T
	api resource.API
	f   *Fanout[string]
}

func newHarness(t *testing.T, buffer int) *harness {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	reg.Register(resource.Registration{Type: itemType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
	svc := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg, Logger: testlog.Logger(t)})
	if err := core.Bootstrap(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	f := New(Config[string]{
		Watcher:  svc,
		Request:  &pbresource.WatchListRequest{Type: itemType, Tenancy: &pbresource.Tenancy{Namespace: ids.WildcardNamespace}},
		Key:      keyOfItem,
		Suppress: echoed,
		Buffer:   buffer,
		Logger:   testlog.Logger(t),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fanout: %v", err)
		}
	})
	return &harness{t: t, api: svc, f: f}
}

func itemID(name string) *pbresource.ID {
	return &pbresource.ID{Type: itemType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name}
}

// put writes item name under key, with labels, and waits until the Fanout
// has it.
func (h *harness) put(name, key string, labels map[string]string) {
	h.t.Helper()
	data, _ := anypb.New(wrapperspb.String(key))
	out, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: itemID(name), Data: data, Metadata: labels}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.caughtUp(out.GetResource().GetVersion())
}

// caughtUp waits until the Fanout has applied the write at version (the
// store's index): it follows the store, a little behind it.
func (h *harness) caughtUp(version string) {
	h.t.Helper()
	want, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		at := h.f.Index()
		if at >= want {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the fanout is at index %d, not %d", at, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) remove(name string) {
	h.t.Helper()
	if _, err := h.api.Delete(context.Background(), &pbresource.DeleteRequest{Id: itemID(name)}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) subscribe(key string) ([]*pbresource.Resource, *Subscription[string]) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, _, sub, err := h.f.Subscribe(ctx, key, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(sub.Close)
	return snap, sub
}

// next reads the subscription's next event, with a deadline.
func next(t *testing.T, sub *Subscription[string]) (*pbresource.WatchEvent, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return sub.Next(ctx)
}

// expect reads sub's next event and checks its op and resource name.
func expect(t *testing.T, sub *Subscription[string], op pbresource.WatchEvent_Op, name string) *pbresource.WatchEvent {
	t.Helper()
	ev, err := next(t, sub)
	if err != nil || ev.GetOp() != op || ev.GetResource().GetId().GetName() != name {
		t.Fatalf("event: %v, %v; want %v of %s", ev, err, op, name)
	}
	return ev
}

func names(rs []*pbresource.Resource) map[string]bool {
	out := map[string]bool{}
	for _, r := range rs {
		out[r.GetId().GetName()] = true
	}
	return out
}

// Each subscriber gets its own key's resources only: a snapshot, then the
// changes, in order.
func TestSubscribersSeeTheirKeyOnly(t *testing.T) {
	h := newHarness(t, 0)
	h.put("a1", "k1", nil)
	h.put("b1", "k2", nil)
	h.put("a2", "k1", nil)
	h.put("n", "", nil) // under no key: nobody's

	snap, sub := h.subscribe("k1")
	if got := names(snap); len(got) != 2 || !got["a1"] || !got["a2"] {
		t.Fatalf("snapshot of k1: %v", got)
	}
	h.put("b2", "k2", nil) // not k1's: never sent
	h.put("a3", "k1", nil)
	h.remove("a1")
	expect(t, sub, pbresource.WatchEvent_OP_UPSERT, "a3")
	expect(t, sub, pbresource.WatchEvent_OP_DELETE, "a1")
	snap2, _ := h.subscribe("k2")
	if got := names(snap2); len(got) != 2 || !got["b1"] || !got["b2"] {
		t.Fatalf("snapshot of k2: %v", got)
	}
	if snap3, _ := h.subscribe("k9"); len(snap3) != 0 {
		t.Fatalf("a key without resources: %v", snap3)
	}
}

// A resource that moves to another key, or to none, leaves the first key's
// stream (a DELETE) and enters the second's (an UPSERT).
func TestResourceChangesKey(t *testing.T) {
	h := newHarness(t, 0)
	h.put("t", "k1", nil)
	_, sub1 := h.subscribe("k1")
	_, sub2 := h.subscribe("k2")
	h.remove("t")
	h.put("t", "k2", nil) // deleted and created again elsewhere
	expect(t, sub1, pbresource.WatchEvent_OP_DELETE, "t")
	expect(t, sub2, pbresource.WatchEvent_OP_UPSERT, "t")
	h.put("t", "k1", nil) // updated to another key
	expect(t, sub2, pbresource.WatchEvent_OP_DELETE, "t")
	expect(t, sub1, pbresource.WatchEvent_OP_UPSERT, "t")
	h.put("t", "", nil) // updated to no key
	ev := expect(t, sub1, pbresource.WatchEvent_OP_DELETE, "t")
	if k, _ := keyOfItem(ev.GetResource()); k != "k1" {
		t.Fatalf("the DELETE carries %q; want the version the subscriber had (k1)", k)
	}
	if snap, _ := h.subscribe("k1"); len(snap) != 0 {
		t.Fatalf("k1 after t left it: %v", names(snap))
	}
}

// A subscriber that does not keep up is ended with OutOfRange after the
// events it had, not allowed to hold the others up.
func TestSlowSubscriberIsEnded(t *testing.T) {
	h := newHarness(t, 2)
	_, slow := h.subscribe("k1")
	_, other := h.subscribe("k2")
	for _, n := range []string{"a", "b", "c", "d"} {
		h.put(n, "k1", nil)
	}
	h.put("z", "k2", nil)
	expect(t, other, pbresource.WatchEvent_OP_UPSERT, "z")
	var got []string
	for {
		ev, err := next(t, slow)
		if err != nil {
			if !errors.Is(err, ErrFellBehind) || !resource.NeedsRelist(err) {
				t.Fatalf("ended with %v, want ErrFellBehind (OutOfRange)", err)
			}
			break
		}
		got = append(got, ev.GetResource().GetId().GetName())
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("events before the end: %v, want the first two in order", got)
	}
}

// When the Fanout lists again, every subscriber is told to start over, and
// a new subscription sees the listing.
func TestResetEndsSubscribers(t *testing.T) {
	h := newHarness(t, 0)
	h.put("a", "k1", nil)
	_, sub := h.subscribe("k1")
	h.f.reset()
	if _, err := next(t, sub); !errors.Is(err, ErrRestarting) || !resource.NeedsRelist(err) {
		t.Fatalf("after a reset: %v, want ErrRestarting (OutOfRange)", err)
	}
	// The Fanout is not ready until its next listing; its watch still
	// runs, so a reset alone leaves it waiting. Feed it a fresh snapshot
	// the way its watch would after starting over.
	h.f.apply(&pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_END_OF_SNAPSHOT})
	if snap, _ := h.subscribe("k1"); len(snap) != 0 {
		t.Fatalf("snapshot after a reset with nothing listed again: %v", snap)
	}
}

// An update Suppress names is not sent, but the index keeps it: the next
// snapshot has it, and the next update is sent.
func TestSuppressedUpdatesAreNotSent(t *testing.T) {
	h := newHarness(t, 0)
	h.put("t", "k1", nil)
	_, sub := h.subscribe("k1")
	h.put("t", "k1", map[string]string{"echo": "yes", "n": "1"})
	h.put("t", "k1", map[string]string{"n": "2"})
	ev := expect(t, sub, pbresource.WatchEvent_OP_UPSERT, "t")
	if n := ev.GetResource().GetMetadata()["n"]; n != "2" {
		t.Fatalf("first event after the suppressed one has n=%q; want 2", n)
	}
	h.put("t", "k1", map[string]string{"echo": "yes", "n": "3"})
	snap, _ := h.subscribe("k1")
	if len(snap) != 1 || snap[0].GetMetadata()["n"] != "3" {
		t.Fatalf("snapshot after a suppressed update: %v; want it (n=3)", snap)
	}
}

// A stopped Fanout ends its subscribers and refuses new ones, as
// Unavailable: another server may serve them.
func TestStopEndsSubscribers(t *testing.T) {
	h := newHarness(t, 0)
	_, sub := h.subscribe("k1")
	h.f.stop()
	if _, err := next(t, sub); status.Code(err) != codes.Unavailable {
		t.Fatalf("after stop: %v; want Unavailable", err)
	}
	if _, _, _, err := h.f.Subscribe(context.Background(), "k1", 0); status.Code(err) != codes.Unavailable {
		t.Fatalf("subscribe after stop: %v; want Unavailable", err)
	}
}

// TestSubscribeNeverShowsAnOlderView: a subscriber that has seen index N
// gets a snapshot as of N or later. Writes of other types move the index
// too (the store's progress marks), so a Fanout whose view is current
// serves it at once; a view that cannot reach N in time is refused, as
// Unavailable (this server is behind) or DataLoss (the cluster never
// committed N).
func TestSubscribeNeverShowsAnOlderView(t *testing.T) {
	h := newHarness(t, 0)
	h.put("t1", "k1", nil)
	// A write of another type: no event, but the view is current as of
	// its index.
	nsData, _ := anypb.New(&pbcore.Namespace{})
	ns, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: &pbresource.ID{Type: core.NamespaceType, Name: "other"}, Data: nsData}})
	if err != nil {
		t.Fatal(err)
	}
	seen, _ := strconv.ParseUint(ns.GetResource().GetVersion(), 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, index, sub, err := h.f.Subscribe(ctx, "k1", seen)
	if err != nil {
		t.Fatalf("subscribe from the current index %d: %v", seen, err)
	}
	sub.Close()
	if index < seen || len(snap) != 1 {
		t.Fatalf("snapshot at index %d with %d resources; want at least %d with t1", index, len(snap), seen)
	}

	h.f.cfg.MinIndexWait = 50 * time.Millisecond
	_, _, _, err = h.f.Subscribe(ctx, "k1", seen+1000)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("subscribe from an index the view has not reached: %v; want Unavailable", err)
	}
	h.f.SetClusterIndex(func(context.Context) (uint64, error) { return seen, nil })
	_, _, _, err = h.f.Subscribe(ctx, "k1", seen+1000)
	if status.Code(err) != codes.DataLoss {
		t.Fatalf("subscribe from an index the cluster never committed: %v; want DataLoss", err)
	}

	// A subscriber that waits gets its snapshot once the view gets there.
	h.f.cfg.MinIndexWait = 10 * time.Second
	type result struct {
		index uint64
		err   error
	}
	got := make(chan result, 1)
	go func() {
		_, index, sub, err := h.f.Subscribe(ctx, "k1", seen+1)
		if err == nil {
			sub.Close()
		}
		got <- result{index, err}
	}()
	h.put("t2", "k2", nil)
	if r := <-got; r.err != nil || r.index < seen+1 {
		t.Fatalf("subscribe that waited: index %d, %v", r.index, r.err)
	}
}
