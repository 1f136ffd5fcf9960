package inmem

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// TestSlowWatcherIsCutOff: a watcher that does not read is cut off once its
// buffer is full, keeps what was buffered, and never holds a writer up. It
// runs in a synctest bubble, where a writer blocked on a watcher's channel
// would be reported as a deadlock instead of hanging the test.
func TestSlowWatcherIsCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBackend(WithWatcherBuffer(2))
		slow := openWatch(t, b, 0)
		fast := openWatch(t, b, 0)
		skipSnapshot(t, slow)
		skipSnapshot(t, fast)

		var written []*pbresource.Resource
		for i := range 6 {
			res := write(t, b, newRes("default", fmt.Sprintf("r%d", i), "u"))
			written = append(written, res)
			if ev := mustNext(t, fast); ev.GetResource() != res {
				t.Fatalf("fast watcher got %s, want the upsert of %s", evString(ev), res.GetId().GetName())
			}
		}
		// Deletes and batches do not wait for the slow watcher either.
		if err := b.DeleteCAS(t.Context(), written[0].GetId(), ""); err != nil {
			t.Fatal(err)
		}
		if ev := mustNext(t, fast); ev.GetOp() != pbresource.WatchEvent_OP_DELETE {
			t.Fatalf("fast watcher got %s, want the delete of r0", evString(ev))
		}
		if _, err := b.WriteBatch(t.Context(), []*pbresource.Resource{newRes("default", "x", "u"), newRes("default", "y", "u")}); err != nil {
			t.Fatal(err)
		}
		if got := watcherCount(b.Store()); got != 1 {
			t.Fatalf("the store feeds %d watchers; want only the fast one", got)
		}

		for _, want := range written[:2] {
			if ev := mustNext(t, slow); ev.GetResource() != want {
				t.Fatalf("slow watcher got %s, want its buffered upsert of %s", evString(ev), want.GetId().GetName())
			}
		}
		for range 2 {
			if ev, err := nextEvent(t, slow); !errors.Is(err, storage.ErrWatchTooSlow) {
				t.Fatalf("slow watcher after its buffer: %v, %v; want ErrWatchTooSlow", ev, err)
			}
		}

		// The fast watcher got everything.
		for _, want := range []string{"x", "y"} {
			if ev := mustNext(t, fast); ev.GetResource().GetId().GetName() != want {
				t.Fatalf("fast watcher got %s, want an event of %s", evString(ev), want)
			}
		}
		fast.Close()
		if got := watcherCount(b.Store()); got != 0 {
			t.Fatalf("after Close the store still feeds %d watchers", got)
		}
	})
}

// TestWatchOnlyCountsMatchingEvents: events a watcher does not match do not
// fill its buffer.
func TestWatchOnlyCountsMatchingEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := NewBackend(WithWatcherBuffer(1))
		w, err := b.WatchList(t.Context(), testTyp, &pbresource.Tenancy{Namespace: "watched"}, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		skipSnapshot(t, w)
		for i := range 10 {
			write(t, b, newRes("other", fmt.Sprintf("r%d", i), "u"))
		}
		want := write(t, b, newRes("watched", "r", "u"))
		if ev := mustNext(t, w); ev.GetResource() != want {
			t.Fatalf("got %s, want the upsert of watched/r", evString(ev))
		}
	})
}

// TestWatchResumedAheadOfTheStore: a Raft follower that lags may be asked to
// resume from an index another server gave the caller. The changes up to
// that index were seen already; only later ones are "after" it.
func TestWatchResumedAheadOfTheStore(t *testing.T) {
	b := NewBackend()
	write(t, b, newRes("default", "before", "u")) // index 1
	w := openWatch(t, b, 4)
	if ev := mustNext(t, w); ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT || ev.GetIndex() != 4 {
		t.Fatalf("got %s, want END_OF_SNAPSHOT@4", evString(ev))
	}
	for i := 2; i <= 6; i++ {
		write(t, b, newRes("default", fmt.Sprintf("r%d", i), "u"))
	}
	for _, want := range []uint64{5, 6} {
		if ev := mustNext(t, w); ev.GetIndex() != want {
			t.Fatalf("got %s, want the change at %d (those up to 4 were seen)", evString(ev), want)
		}
	}
}

// A watcher that asks for a larger buffer through its context
// (storage.WithWatchBuffer, as the servers' own watchers do) takes a burst
// that cuts off one with the store's default.
func TestWatchBufferAskedThroughTheContext(t *testing.T) {
	b := NewBackend(WithWatcherBuffer(2))
	plain := openWatch(t, b, 0)
	big, err := b.WatchList(storage.WithWatchBuffer(context.Background(), 10), testTyp, &pbresource.Tenancy{Namespace: ids.WildcardNamespace}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(big.Close)
	skipSnapshot(t, plain)
	skipSnapshot(t, big)
	var burst []*pbresource.Resource
	for i := range 8 {
		burst = append(burst, newRes("default", fmt.Sprintf("r%d", i), "u"))
	}
	if _, err := b.WriteBatch(t.Context(), burst); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if ev := mustNext(t, big); ev.GetResource().GetId().GetName() != burst[i].GetId().GetName() {
			t.Fatalf("watcher with a buffer of 10 got %s, want r%d", evString(ev), i)
		}
	}
	for range 2 {
		mustNext(t, plain)
	}
	if _, err := nextEvent(t, plain); !errors.Is(err, storage.ErrWatchTooSlow) {
		t.Fatalf("watcher with the default buffer of 2 after a burst of 8: %v; want ErrWatchTooSlow", err)
	}
}

// TestProgressMarks: a watcher that asked for progress marks learns, after
// each change, the store's new index (an END_OF_SNAPSHOT event, after the
// change's own events when it has any); others never see one.
func TestProgressMarks(t *testing.T) {
	b := NewBackend()
	other := &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Other"}
	ctx := storage.WithProgressMarks(t.Context())
	marked, err := b.WatchList(ctx, newRes("default", "x", "u").GetId().GetType(), &pbresource.Tenancy{Namespace: "default"}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer marked.Close()
	plain := openWatch(t, b, 0)
	skipSnapshot(t, marked)
	skipSnapshot(t, plain)

	mine := write(t, b, newRes("default", "a", "u"))
	if ev := mustNext(t, marked); ev.GetResource() != mine {
		t.Fatalf("got %s, want the upsert of a", evString(ev))
	}
	if ev := mustNext(t, marked); ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT || fmt.Sprint(ev.GetIndex()) != mine.GetVersion() {
		t.Fatalf("after its own change: %s; want a progress mark at %s", evString(ev), mine.GetVersion())
	}
	theirs := write(t, b, &pbresource.Resource{Id: &pbresource.ID{Type: other, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "o"}})
	ev := mustNext(t, marked)
	if ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT || fmt.Sprint(ev.GetIndex()) != theirs.GetVersion() {
		t.Fatalf("after a change of another type: %s; want a progress mark at %s", evString(ev), theirs.GetVersion())
	}
	last := write(t, b, newRes("default", "b", "u"))
	if ev := mustNext(t, marked); ev.GetResource() != last {
		t.Fatalf("got %s, want the upsert of b", evString(ev))
	}
	if ev := mustNext(t, marked); ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT || fmt.Sprint(ev.GetIndex()) != last.GetVersion() {
		t.Fatalf("after its own change: %s; want a progress mark at %s, which says the update's events are all in", evString(ev), last.GetVersion())
	}
	for _, want := range []*pbresource.Resource{mine, last} {
		if ev := mustNext(t, plain); ev.GetResource() != want {
			t.Fatalf("a watcher without marks got %s, want the upsert of %s", evString(ev), want.GetId().GetName())
		}
	}
}

// TestDroppedProgressMarkArrivesLate: a mark the watcher's full buffer
// could not take is handed over once it has read the buffer, so that an
// idle store does not leave its view looking older than it is.
func TestDroppedProgressMarkArrivesLate(t *testing.T) {
	b := NewBackend(WithWatcherBuffer(3))
	other := &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Other"}
	ctx := storage.WithProgressMarks(t.Context())
	w, err := b.WatchList(ctx, newRes("default", "x", "u").GetId().GetType(), &pbresource.Tenancy{Namespace: "default"}, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	skipSnapshot(t, w)
	a := write(t, b, newRes("default", "a", "u")) // its event and its mark
	c := write(t, b, newRes("default", "c", "u")) // its event; the buffer is full
	theirs := write(t, b, &pbresource.Resource{Id: &pbresource.ID{Type: other, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "o"}})
	if ev := mustNext(t, w); ev.GetResource() != a {
		t.Fatalf("got %s, want the upsert of a", evString(ev))
	}
	if ev := mustNext(t, w); ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT || fmt.Sprint(ev.GetIndex()) != a.GetVersion() {
		t.Fatalf("got %s, want the mark at %s", evString(ev), a.GetVersion())
	}
	if ev := mustNext(t, w); ev.GetResource() != c {
		t.Fatalf("got %s, want the upsert of c", evString(ev))
	}
	ev := mustNext(t, w)
	if ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT || fmt.Sprint(ev.GetIndex()) != theirs.GetVersion() {
		t.Fatalf("after the buffer: %s; want the dropped mark at %s", evString(ev), theirs.GetVersion())
	}
}
