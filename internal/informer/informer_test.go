package informer_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"pgregory.net/rapid"

	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/informer"
)

var (
	names  = []string{"a", "b", "c", "d", "e"}
	groups = []string{"g1", "g2", "g3"}
)

// check compares, once the informer has caught up with the store, the
// cache, its index and every subscriber's model with a recomputation from
// the store.
func (h *harness) check(t tb, models ...*model) {
	t.Helper()
	h.caughtUp()
	want := h.stored()
	if got := h.cached(); !maps.Equal(got, want) {
		t.Fatalf("the cache holds %v; the store %v", got, want)
	}
	wantGroups := h.storedGroups()
	if got := h.cachedGroups(groups); !maps.EqualFunc(got, wantGroups, slices.Equal) {
		t.Fatalf("the group index holds %v; recomputed from the store %v", got, wantGroups)
	}
	if err := h.in.Verify(); err != nil {
		t.Fatal(err)
	}
	for i, m := range models {
		held, problems := m.snapshot()
		if len(problems) > 0 {
			t.Fatalf("subscriber %d got deltas that do not fit what it held: %v", i, problems)
		}
		if !maps.Equal(held, want) {
			t.Fatalf("subscriber %d built %v from its deltas; the store holds %v", i, held, want)
		}
	}
}

// TestDeltasAndIndexesEqualTheStore: after any sequence of writes, batch
// writes, deletes, broken watches and late subscribers, the cache, its
// index and what each subscriber built from its deltas alone equal a
// recomputation from the store, and no delta is lost or doubled.
func TestDeltasAndIndexesEqualTheStore(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		h := newHarness(rt, t, true)
		first := newModel()
		if _, err := h.in.Subscribe(itemType, first.take); err != nil {
			rt.Fatal(err)
		}
		h.start()
		models := []*model{first}
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for range steps {
			switch rapid.IntRange(0, 5).Draw(rt, "action") {
			case 0, 1:
				h.put(rapid.SampledFrom(names).Draw(rt, "name"), rapid.SampledFrom(groups).Draw(rt, "group"))
			case 2:
				batch := rapid.SliceOfNDistinct(rapid.SampledFrom(names), 1, 3, rapid.ID).Draw(rt, "batch")
				h.putBatch(batch, rapid.SampledFrom(groups).Draw(rt, "group"))
			case 3:
				h.remove(rapid.SampledFrom(names).Draw(rt, "name"))
			case 4:
				h.src.breakAll()
			case 5:
				m := newModel()
				sub, err := h.in.Subscribe(itemType, m.take)
				if err != nil {
					rt.Fatal(err)
				}
				rt.Cleanup(sub.Cancel)
				models = append(models, m)
			}
			if rapid.Bool().Draw(rt, "check") {
				h.check(rt, models...)
			}
		}
		h.check(rt, models...)
	})
}

// TestBrokenWatchResumesFromItsIndex: a watch that breaks is opened again
// after the index it had wholly seen, not from a new listing, and the
// changes made while it was down reach the subscriber once each.
func TestBrokenWatchResumesFromItsIndex(t *testing.T) {
	h := newHarness(t, t, true)
	m := newModel()
	if _, err := h.in.Subscribe(itemType, m.take); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.put("a", "g1")
	h.put("b", "g1")
	h.check(t, m)
	before := m.deltas

	// The source is down: the informer retries, and cannot open.
	down := status.Error(codes.Unavailable, "down")
	h.src.setRefuse(func(uint64) error { return down })
	h.src.breakAll()
	h.put("a", "g2")
	h.remove("b")
	h.putBatch([]string{"c", "d"}, "g3")
	h.src.setRefuse(nil)
	h.check(t, m)

	if got := m.deltas - before; got != 4 {
		t.Errorf("%d deltas for the 4 changes made while the watch was down (a changed, b removed, c and d added)", got)
	}
	opens := h.src.opens()
	if opens[0] != 0 {
		t.Errorf("the first watch was opened after index %d; want a listing (0)", opens[0])
	}
	for i, since := range opens[1:] {
		if since == 0 {
			t.Errorf("watch %d listed again; want it resumed after an index (opens: %v)", i+1, opens)
		}
	}
	if len(opens) < 2 {
		t.Errorf("the watch was opened %d times; want it opened again after the break", len(opens))
	}
	if got := h.in.ByIndex(itemType, byGroup.Name, "g3"); len(got) != 2 {
		t.Errorf("group g3 holds %d items; want c and d", len(got))
	}
}

// TestWatchThatCannotResumeListsAgain: when the source can no longer
// resume from the informer's index (OutOfRange), the informer lists again
// and hands on the difference: the deletions made meanwhile as removed,
// the rest as added or changed, each once.
func TestWatchThatCannotResumeListsAgain(t *testing.T) {
	h := newHarness(t, t, true)
	m := newModel()
	if _, err := h.in.Subscribe(itemType, m.take); err != nil {
		t.Fatal(err)
	}
	h.start()
	for _, n := range names {
		h.put(n, "g1")
	}
	h.check(t, m)

	down := status.Error(codes.Unavailable, "down")
	h.src.setRefuse(func(uint64) error { return down })
	h.src.breakAll()
	h.remove("a")
	h.remove("b")
	h.put("b", "g2") // another incarnation
	h.put("c", "g3")
	gone := status.Error(codes.OutOfRange, "cannot resume from there")
	h.src.setRefuse(func(since uint64) error {
		if since > 0 {
			return gone
		}
		return nil
	})
	h.check(t, m)
	if opens := h.src.opens(); opens[len(opens)-1] != 0 {
		t.Errorf("the last watch was opened after index %d; want a new listing (opens: %v)", opens[len(opens)-1], opens)
	}
	if got := len(h.in.ByIndex(itemType, byGroup.Name, "g1")); got != 2 {
		t.Errorf("group g1 holds %d items; want d and e", got)
	}
}

// TestListingFromALaggingServerIsRefused: when the link moves to a server
// behind what the informer holds, and the watch cannot resume there, that
// server's listing (older) is refused: the cache and the subscribers keep
// the newer state, with no delta, until a server lists at least as new.
func TestListingFromALaggingServerIsRefused(t *testing.T) {
	h := newHarness(t, t, true)
	m := newModel()
	if _, err := h.in.Subscribe(itemType, m.take); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.put("a", "g1")
	h.put("b", "g1")
	lagging, laggingStore := h.server() // holds a and b; never sees what follows
	h.remove("a")
	h.put("b", "g2")
	h.put("c", "g3")
	h.check(t, m)
	want, deltas := h.cached(), m.deltas

	// The link moves to the lagging server, which cannot resume from the
	// informer's index: the informer lists there.
	gone := status.Error(codes.OutOfRange, "cannot resume from there")
	cannotResume := func(since uint64) error {
		if since > 0 {
			return gone
		}
		return nil
	}
	moved := len(h.src.opens())
	h.src.moveTo(lagging, cannotResume)
	h.src.breakAll()
	// Two listings opened: the first was read whole and refused (or the
	// cache stepped back).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for listings := 0; listings < 2 && maps.Equal(h.cached(), want); {
		if ctx.Err() != nil {
			t.Fatalf("the informer did not list twice on the lagging server (opens: %v)", h.src.opens())
		}
		listings = 0
		for _, since := range h.src.opens()[moved:] {
			if since == 0 {
				listings++
			}
		}
		time.Sleep(time.Millisecond) // polls the condition, asserts nothing on time
	}
	if got := h.cached(); !maps.Equal(got, want) {
		t.Fatalf("after the lagging server's listing the cache holds %v; want the newer %v kept", got, want)
	}
	if _, problems := m.snapshot(); len(problems) > 0 || m.deltas != deltas {
		t.Fatalf("the stale listing made %d deltas (problems: %v); want none", m.deltas-deltas, problems)
	}
	if err := h.in.Verify(); err != nil {
		t.Fatal(err)
	}

	// The server catches up: its listing is taken, and the informer
	// follows it.
	h.caughtUpWith(laggingStore)
	h.check(t, m)
	if m.deltas != deltas {
		t.Errorf("the caught-up listing made %d deltas; it holds what the informer held", m.deltas-deltas)
	}
}

// TestDeclare: a type is declared before Start, with valid indexes; a read
// of a type nobody declared fails or panics, naming it.
func TestDeclare(t *testing.T) {
	h := newHarness(t, t, true)
	if err := h.in.Declare(controller.CachedType{Type: itemType, Indexes: []*controller.Index{{Name: "group", Keys: byGroup.Keys}}}); err == nil {
		t.Error("a second index named group on the type was accepted")
	}
	if err := h.in.Declare(controller.CachedType{Type: itemType, Indexes: []*controller.Index{{Name: ""}}}); err == nil {
		t.Error("an index without a name was accepted")
	}
	h.start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.in.WaitIndex(ctx, itemType, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.in.Declare(controller.CachedType{Type: itemType}); !errors.Is(err, informer.ErrStarted) {
		t.Errorf("declare after start: %v; want ErrStarted", err)
	}
	if _, err := h.in.Subscribe(core.NamespaceType, func(informer.Delta) {}); !errors.Is(err, informer.ErrNotDeclared) {
		t.Errorf("subscribe to an undeclared type: %v; want ErrNotDeclared", err)
	}
	if err := h.in.WaitIndex(ctx, core.NamespaceType, 1); !errors.Is(err, informer.ErrNotDeclared) {
		t.Errorf("wait on an undeclared type: %v; want ErrNotDeclared", err)
	}
}

// TestWaitIndexWaitsForTheIndex: a read bounded by an index the informer
// has not applied waits for it, and fails with the context when it never
// comes, naming how far the type got.
func TestWaitIndexWaitsForTheIndex(t *testing.T) {
	h := newHarness(t, t, true)
	h.start()
	h.put("a", "g1")
	h.caughtUp()
	at := h.in.Index(itemType)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h.in.WaitIndex(short, itemType, at+1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait for an index not written yet: %v; want the deadline", err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- h.in.WaitIndex(ctx, itemType, at+1)
	}()
	res := h.put("b", "g2")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h.in.Get(itemID("b")) == nil {
		t.Fatalf("after waiting for index %d (b's version %s), b is not in the cache", at+1, res.GetVersion())
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	idx, err := h.in.WaitConsistent(ctx, itemType)
	if err != nil || idx < at+1 {
		t.Fatalf("consistent read: index %d, %v; want at least %d", idx, err, at+1)
	}
	last, err := h.in.WaitChange(ctx, itemType, 0)
	if err != nil || last < at+1 {
		t.Fatalf("blocking query from 0: index %d, %v; want b's change at least", last, err)
	}
	short2, cancel3 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel3()
	if got, err := h.in.WaitChange(short2, itemType, last); !errors.Is(err, context.DeadlineExceeded) || got != last {
		t.Fatalf("blocking query past the last change: %d, %v; want %d and the deadline", got, err, last)
	}
}
