package storagetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

const (
	opUpsert = pbresource.WatchEvent_OP_UPSERT
	opDelete = pbresource.WatchEvent_OP_DELETE
)

// expectDelete reads the next event and checks it deletes the incarnation
// of res (its version in the event is not part of the contract).
func expectDelete(t *testing.T, w storage.Watch, res *pbresource.Resource) *pbresource.WatchEvent {
	t.Helper()
	ev := next(t, w)
	got := ev.GetResource().GetId()
	if ev.GetOp() != opDelete || !ids.SameName(got, res.GetId()) || got.GetUid() != res.GetId().GetUid() {
		t.Fatalf("watch event: got %s, want DELETE of %s", describeEvent(ev), describe(res))
	}
	return ev
}

// increasing checks that each live event's index is above the one before.
type increasing struct{ last uint64 }

func (inc *increasing) check(t *testing.T, ev *pbresource.WatchEvent) {
	t.Helper()
	if ev.GetIndex() <= inc.last {
		t.Fatalf("event %s: index not above the previous %d", describeEvent(ev), inc.last)
	}
	inc.last = ev.GetIndex()
}

func snapshotResources(evs []*pbresource.WatchEvent) []*pbresource.Resource {
	out := make([]*pbresource.Resource, len(evs))
	for i, ev := range evs {
		out[i] = ev.GetResource()
	}
	return out
}

func testWatchSnapshotThenChanges(t *testing.T, b storage.Backend) {
	typ := testType("WatchSnapshot")
	a := mustWrite(t, b, newResource(typ, "ns1", "a"))
	bb := mustWrite(t, b, newResource(typ, "ns1", "b"))
	mustWrite(t, b, newResource(typ, "ns2", "a"))
	last := mustWrite(t, b, newResource(testType("WatchSnapshotOther"), "ns1", "a"))
	// The watch starts from the local copy: let it catch up first, so the
	// snapshot must hold a and b.
	waitApplied(t, b, last.GetId(), last.GetVersion())

	w := openWatch(t, b, typ, "ns1", "", 0)
	snap, end := readSnapshot(t, w)
	requireSameResources(t, "the snapshot", snapshotResources(snap), []*pbresource.Resource{a, bb})

	// Changes made through this backend reach its watch, in order.
	inc := increasing{last: end.GetIndex()}
	a2 := mustWrite(t, b, withData(a, "second"))
	inc.check(t, expectEvent(t, w, opUpsert, a2))
	mustDelete(t, b, bb.GetId(), bb.GetVersion())
	inc.check(t, expectDelete(t, w, bb))
	c := mustWrite(t, b, newResource(typ, "ns1", "c"))
	inc.check(t, expectEvent(t, w, opUpsert, c))
	mustWrite(t, b, newResource(typ, "ns2", "c")) // not watched
	a3 := mustWrite(t, b, withData(a2, "third"))
	inc.check(t, expectEvent(t, w, opUpsert, a3))

	// Several changes made before the watcher reads are all delivered, in
	// the order they were made.
	c2 := mustWrite(t, b, withData(c, "second"))
	mustDelete(t, b, a3.GetId(), "")
	bb2 := mustWrite(t, b, newResource(typ, "ns1", "b"))
	inc.check(t, expectEvent(t, w, opUpsert, c2))
	inc.check(t, expectDelete(t, w, a3))
	inc.check(t, expectEvent(t, w, opUpsert, bb2))
}

func testWatchFilters(t *testing.T, b storage.Backend) {
	typ := testType("WatchFilters")
	otherVersion := &pbresource.Type{Group: typ.Group, GroupVersion: "v2", Kind: typ.Kind}
	otherKind := testType("WatchFiltersOther")

	wNS := openWatch(t, b, typ, "ns1", "web-", 0)
	wAll := openWatch(t, b, typ, ids.WildcardNamespace, "web-", 0)
	wType := openWatch(t, b, typ, ids.WildcardNamespace, "", 0)
	for _, w := range []storage.Watch{wNS, wAll, wType} {
		if snap, _ := readSnapshot(t, w); len(snap) != 0 {
			t.Fatalf("the snapshot of an empty type holds %d resources", len(snap))
		}
	}

	otherNS := mustWrite(t, b, newResource(typ, "ns2", "web-1"))
	otherName := mustWrite(t, b, newResource(typ, "ns1", "db-1"))
	mustWrite(t, b, newResource(otherVersion, "ns1", "web-1"))
	mustWrite(t, b, newResource(otherKind, "ns1", "web-1"))
	extendedNS := mustWrite(t, b, newResource(typ, "ns1-x", "web-1"))
	match := mustWrite(t, b, newResource(typ, "ns1", "web-1"))

	expectEvent(t, wNS, opUpsert, match)
	for _, res := range []*pbresource.Resource{otherNS, extendedNS, match} {
		expectEvent(t, wAll, opUpsert, res)
	}
	for _, res := range []*pbresource.Resource{otherNS, otherName, extendedNS, match} {
		expectEvent(t, wType, opUpsert, res)
	}

	// Deletions are filtered the same way.
	mustDelete(t, b, otherNS.GetId(), "")
	mustDelete(t, b, otherName.GetId(), "")
	mustDelete(t, b, match.GetId(), "")
	expectDelete(t, wNS, match)
	expectDelete(t, wAll, otherNS)
	expectDelete(t, wAll, match)
	expectDelete(t, wType, otherNS)
	expectDelete(t, wType, otherName)
	expectDelete(t, wType, match)
}

func testWatchBatch(t *testing.T, b storage.Backend) {
	typ := testType("WatchBatch")
	w := openWatch(t, b, typ, ids.WildcardNamespace, "", 0)
	_, end := readSnapshot(t, w)

	out, err := b.WriteBatch(t.Context(), []*pbresource.Resource{
		newResource(typ, "ns1", "a"),
		newResource(testType("WatchBatchOther"), "ns1", "a"),
		newResource(typ, "ns2", "b"),
		newResource(typ, "ns1", "c"),
	})
	if err != nil {
		t.Fatalf("WriteBatch: %v", err)
	}
	var got []*pbresource.Resource
	first := next(t, w)
	for ev := first; ; ev = next(t, w) {
		if ev.GetOp() != opUpsert || ev.GetIndex() != first.GetIndex() {
			t.Fatalf("batch event %s: want an upsert at the batch's index %d", describeEvent(ev), first.GetIndex())
		}
		got = append(got, ev.GetResource())
		if len(got) == 3 {
			break
		}
	}
	if first.GetIndex() <= end.GetIndex() {
		t.Fatalf("batch index %d not above the snapshot's %d", first.GetIndex(), end.GetIndex())
	}
	requireSameResources(t, "the batch's events", got, []*pbresource.Resource{out[0], out[2], out[3]})

	after := mustWrite(t, b, newResource(typ, "ns1", "after"))
	if ev := expectEvent(t, w, opUpsert, after); ev.GetIndex() <= first.GetIndex() {
		t.Fatalf("event after the batch has index %d, not above the batch's %d", ev.GetIndex(), first.GetIndex())
	}
}

func testWatchResume(t *testing.T, b storage.Backend) {
	typ := testType("WatchResume")
	// A change of another type first, so that the snapshot's index is not
	// 0 (which as sinceIndex asks for a new snapshot) on any backend.
	before := mustWrite(t, b, newResource(testType("WatchResumeOther"), "default", "x"))
	waitApplied(t, b, before.GetId(), before.GetVersion())
	w := openWatch(t, b, typ, "default", "", 0)
	_, end := readSnapshot(t, w)

	x1 := mustWrite(t, b, newResource(typ, "default", "x1"))
	mustWrite(t, b, newResource(typ, "other", "x1")) // not watched
	x2 := mustWrite(t, b, newResource(typ, "default", "x2"))
	x1b := mustWrite(t, b, withData(x1, "second"))
	mustDelete(t, b, x2.GetId(), "")
	x3 := mustWrite(t, b, newResource(typ, "default", "x3"))
	events := []*pbresource.WatchEvent{
		expectEvent(t, w, opUpsert, x1),
		expectEvent(t, w, opUpsert, x2),
		expectEvent(t, w, opUpsert, x1b),
		expectDelete(t, w, x2),
		expectEvent(t, w, opUpsert, x3),
	}
	batch, err := b.WriteBatch(t.Context(), []*pbresource.Resource{
		newResource(typ, "default", "x5"),
		newResource(typ, "default", "x6"),
	})
	if err != nil {
		t.Fatalf("WriteBatch: %v", err)
	}
	batchEvents := []*pbresource.WatchEvent{next(t, w), next(t, w)}
	requireSameResources(t, "the batch's events", []*pbresource.Resource{batchEvents[0].GetResource(), batchEvents[1].GetResource()}, batch)
	events = append(events, batchEvents...)
	w.Close()

	resume := func(name string, since uint64, want []*pbresource.WatchEvent) storage.Watch {
		t.Helper()
		r := openWatch(t, b, typ, "default", "", since)
		for _, wantEv := range want {
			if got := next(t, r); !proto.Equal(got, wantEv) {
				t.Fatalf("resumed %s (since %d): got %s, want %s", name, since, describeEvent(got), describeEvent(wantEv))
			}
		}
		expectEnd(t, r)
		return r
	}
	resume("after the snapshot", end.GetIndex(), events)
	for i, ev := range events {
		// Resuming from a batch's index skips the whole batch.
		var later []*pbresource.WatchEvent
		for _, e := range events {
			if e.GetIndex() > ev.GetIndex() {
				later = append(later, e)
			}
		}
		r := resume(fmt.Sprintf("after event %d", i), ev.GetIndex(), later)
		if i == len(events)-1 {
			// A resumed watch goes on with live changes.
			x4 := mustWrite(t, b, newResource(typ, "default", "x4"))
			if got := expectEvent(t, r, opUpsert, x4); got.GetIndex() <= ev.GetIndex() {
				t.Fatalf("live event after resuming has index %d, not above %d", got.GetIndex(), ev.GetIndex())
			}
		}
	}
}

func testWatchClose(t *testing.T, b storage.Backend) {
	typ := testType("WatchClose")
	w, err := b.WatchList(t.Context(), typ, tenancy("default"), "", 0)
	if err != nil {
		t.Fatalf("WatchList: %v", err)
	}
	readSnapshot(t, w)
	a := mustWrite(t, b, newResource(typ, "default", "a"))
	w.Close()

	// After Close, Next may still hand over the one event already due, then
	// fails; it never blocks.
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	for i := 0; ; i++ {
		ev, err := w.Next(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal("Next blocked after Close")
		}
		if err != nil {
			break
		}
		if i > 0 || ev.GetOp() != opUpsert || !proto.Equal(ev.GetResource(), a) {
			t.Fatalf("Next after Close returned %s; only the upsert of %s was due", describeEvent(ev), describe(a))
		}
	}
	if _, err := w.Next(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next after the watch ended = %v; want its error again at once", err)
	}
	w.Close() // a second Close is harmless

	// Close from another goroutine ends a Next that is waiting (with
	// nothing due: a is in the snapshot once the local copy has it).
	waitApplied(t, b, a.GetId(), a.GetVersion())
	w2 := openWatch(t, b, typ, "default", "", 0)
	readSnapshot(t, w2)
	ended := make(chan error, 1)
	go func() {
		_, err := w2.Next(ctx)
		ended <- err
	}()
	w2.Close()
	if err := <-ended; err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a Next waiting when the watch was closed returned %v; want the watch's end at once", err)
	}
}

func testWatchNextContext(t *testing.T, b storage.Backend) {
	typ := testType("WatchNextContext")
	w := openWatch(t, b, typ, "default", "", 0)
	readSnapshot(t, w)

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	if ev, err := w.Next(canceled); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a canceled context and nothing due = %s, %v; want context.Canceled", describeEvent(ev), err)
	}
	short, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if ev, err := w.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with nothing due until its deadline = %s, %v; want context.DeadlineExceeded", describeEvent(ev), err)
	}

	// The end of one Next's context is not the end of the watch.
	a := mustWrite(t, b, newResource(typ, "default", "a"))
	expectEvent(t, w, opUpsert, a)
}

func testWatchIndexTooOld(t *testing.T, newBackend func(*testing.T, int) storage.Backend) {
	const history, writes = 4, 20
	b := newBackend(t, history)
	typ := testType("WatchTooOld")
	w := openWatch(t, b, typ, ids.WildcardNamespace, "", 0)
	readSnapshot(t, w)
	var events []*pbresource.WatchEvent
	for i := range writes {
		res := mustWrite(t, b, newResource(typ, "default", fmt.Sprintf("r%02d", i)))
		events = append(events, expectEvent(t, w, opUpsert, res))
	}

	// Resuming after the first event needs 19 events; only about 4 are kept.
	since := events[0].GetIndex()
	r, err := b.WatchList(t.Context(), typ, tenancy(ids.WildcardNamespace), "", since)
	if err == nil {
		defer r.Close()
		ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
		defer cancel()
		var ev *pbresource.WatchEvent
		if ev, err = r.Next(ctx); err == nil {
			t.Fatalf("watch resumed from %d, whose successors are gone, yielded %s; want ErrIndexTooOld", since, describeEvent(ev))
		}
	}
	if !errors.Is(err, storage.ErrIndexTooOld) {
		t.Fatalf("watch resumed from %d, whose successors are gone: %v; want ErrIndexTooOld", since, err)
	}

	// Resuming after the last event but one needs only what is kept.
	rr := openWatch(t, b, typ, ids.WildcardNamespace, "", events[writes-2].GetIndex())
	if got := next(t, rr); !proto.Equal(got, events[writes-1]) {
		t.Fatalf("resumed watch: got %s, want %s", describeEvent(got), describeEvent(events[writes-1]))
	}
	expectEnd(t, rr)
}
