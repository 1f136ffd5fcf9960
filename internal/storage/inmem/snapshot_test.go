package inmem

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

var wildcard = &pbresource.Tenancy{Namespace: ids.WildcardNamespace}

func TestRestore(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	gone := write(t, b, newRes("default", "gone", "u1"))
	write(t, b, newRes("default", "kept-name", "u1"))
	w := openWatch(t, b, 0)
	skipSnapshot(t, w)
	buffered := write(t, b, newRes("default", "buffered", "u1"))

	restored := []*pbresource.Resource{
		{Id: testID("default", "kept-name"), Version: "40"},
		{Id: testID("other", "x"), Version: "90", Owner: gone.GetId()},
	}
	restored[0].Id.Uid = "u2"
	if err := b.Store().Restore(100, restored); err != nil {
		t.Fatalf("Restore: %v", err)
	}

	if got := b.Store().Index(); got != 100 {
		t.Fatalf("Index after Restore = %d, want 100", got)
	}
	got, err := b.List(ctx, storage.StrongConsistency, testTyp, wildcard, "")
	if err != nil || len(got) != 2 || !proto.Equal(got[0], restored[0]) || !proto.Equal(got[1], restored[1]) {
		t.Fatalf("List after Restore = %v, %v; want exactly %v", got, err, restored)
	}
	if _, err := b.Read(ctx, storage.StrongConsistency, gone.GetId()); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("Read of a resource the restore dropped: %v, want ErrNotFound", err)
	}
	if owned, err := b.ListByOwner(ctx, gone.GetId()); err != nil || len(owned) != 1 {
		t.Fatalf("ListByOwner after Restore = %v, %v; want the restored x (indexes are rebuilt)", owned, err)
	}

	// The old watch gets what was buffered, then must re-list.
	if ev := mustNext(t, w); ev.GetResource() != buffered {
		t.Fatalf("old watch: got %s, want its buffered upsert", evString(ev))
	}
	for range 2 {
		if _, err := nextEvent(t, w); !errors.Is(err, storage.ErrIndexTooOld) {
			t.Fatalf("old watch after Restore: %v, want ErrIndexTooOld", err)
		}
	}
	if got := watcherCount(b.Store()); got != 0 {
		t.Fatalf("the store still feeds %d watchers from before the restore", got)
	}

	// Resuming from before the restored index is impossible; from it, fine.
	if _, err := b.WatchList(ctx, testTyp, wildcard, "", 99); !errors.Is(err, storage.ErrIndexTooOld) {
		t.Fatalf("WatchList since 99 after Restore(100): %v, want ErrIndexTooOld", err)
	}
	resumed := openWatch(t, b, 100)
	fresh := openWatch(t, b, 0)
	if ev := mustNext(t, resumed); ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT || ev.GetIndex() != 100 {
		t.Fatalf("watch resumed at the restored index: got %s, want END_OF_SNAPSHOT@100", evString(ev))
	}
	if snap := skipSnapshot(t, fresh); len(snap) != 2 {
		t.Fatalf("new watch's snapshot has %d resources, want the 2 restored", len(snap))
	}

	// Writes go on after the restored index, and reach the new watches.
	upd := proto.Clone(restored[0]).(*pbresource.Resource)
	next := write(t, b, upd)
	if next.GetVersion() != "101" {
		t.Fatalf("first write after Restore(100) got version %q, want 101", next.GetVersion())
	}
	for _, nw := range []any{resumed, fresh} {
		if ev := mustNext(t, nw.(storage.Watch)); ev.GetResource() != next || ev.GetIndex() != 101 {
			t.Fatalf("watch after Restore: got %s, want the upsert at 101", evString(ev))
		}
	}
}

// TestForEachIsConsistent: every write rewrites all resources in one batch,
// so a snapshot that mixed two states would show two versions.
func TestForEachIsConsistent(t *testing.T) {
	const n, rounds = 16, 200
	b := NewBackend()
	batch := make([]*pbresource.Resource, n)
	for i := range batch {
		batch[i] = newRes("default", fmt.Sprintf("r%02d", i), "u")
	}
	current, err := b.WriteBatch(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		for range rounds {
			next := make([]*pbresource.Resource, n)
			for i, res := range current {
				next[i] = proto.Clone(res).(*pbresource.Resource)
				next[i].Metadata = map[string]string{"round": res.GetVersion()}
			}
			var err error
			if current, err = b.WriteBatch(context.Background(), next); err != nil {
				t.Errorf("WriteBatch: %v", err)
				return
			}
		}
	}()

	snapshots := 0
	for finished := false; !finished; snapshots++ {
		select {
		case <-done:
			finished = true // one more snapshot of the final state
		default:
		}
		versions := map[string]int{}
		idx, err := b.Store().ForEach(func(res *pbresource.Resource) error {
			versions[res.GetVersion()]++
			runtime.Gosched() // let the writer run in the middle of the walk
			return nil
		})
		if err != nil {
			t.Fatalf("ForEach: %v", err)
		}
		if want := strconv.FormatUint(idx, 10); len(versions) != 1 || versions[want] != n {
			t.Fatalf("ForEach at index %d saw versions %v; want all %d at %s", idx, versions, n, want)
		}
	}
	t.Logf("%d consistent snapshots taken during %d batch writes", snapshots, rounds)
}

func TestForEachStopsOnError(t *testing.T) {
	b := NewBackend()
	for i := range 3 {
		write(t, b, newRes("default", fmt.Sprintf("r%d", i), "u"))
	}
	stop := errors.New("stop")
	calls := 0
	_, err := b.Store().ForEach(func(*pbresource.Resource) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("ForEach = %v after %d calls; want the callback's error after 1", err, calls)
	}
}

// TestForEachRestoreRoundTrip is what a Raft snapshot does: walk one store,
// restore another from the walk.
func TestForEachRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	a := NewBackend()
	owner := write(t, a, newRes("default", "owner", "u"))
	for i := range 5 {
		res := newRes(fmt.Sprintf("ns%d", i%2), fmt.Sprintf("r%d", i), "u")
		res.Owner = owner.GetId()
		write(t, a, res)
	}
	if err := a.DeleteCAS(ctx, testID("ns0", "r2"), ""); err != nil {
		t.Fatal(err)
	}
	var saved []*pbresource.Resource
	idx, err := a.Store().ForEach(func(res *pbresource.Resource) error {
		saved = append(saved, proto.Clone(res).(*pbresource.Resource))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	b := NewBackend()
	if err := b.Store().Restore(idx, saved); err != nil {
		t.Fatal(err)
	}
	if b.Store().Index() != a.Store().Index() {
		t.Fatalf("restored index %d, want %d", b.Store().Index(), a.Store().Index())
	}
	wantList, _ := a.List(ctx, storage.StrongConsistency, testTyp, wildcard, "")
	gotList, _ := b.List(ctx, storage.StrongConsistency, testTyp, wildcard, "")
	wantOwned, _ := a.ListByOwner(ctx, owner.GetId())
	gotOwned, _ := b.ListByOwner(ctx, owner.GetId())
	if !equalResources(gotList, wantList) || !equalResources(gotOwned, wantOwned) {
		t.Fatalf("restored store differs:\nList %v\nwant %v\nListByOwner %v\nwant %v", gotList, wantList, gotOwned, wantOwned)
	}
}

// TestRestoreWhileReading: reads, lists and new watches may run while a
// Raft follower restores a snapshot; the race detector checks the swap.
func TestRestoreWhileReading(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	owner := write(t, b, newRes("default", "owner", "u"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := b.Read(ctx, storage.StrongConsistency, owner.GetId()); err != nil && !errors.Is(err, storage.ErrNotFound) {
					t.Errorf("Read: %v", err)
				}
				if _, err := b.List(ctx, storage.StrongConsistency, testTyp, wildcard, ""); err != nil {
					t.Errorf("List: %v", err)
				}
				if _, err := b.ListByOwner(ctx, owner.GetId()); err != nil {
					t.Errorf("ListByOwner: %v", err)
				}
				w, err := b.WatchList(ctx, testTyp, wildcard, "", 0)
				if err != nil {
					t.Errorf("WatchList: %v", err)
					continue
				}
				w.Close()
			}
		})
	}
	for i := range 50 {
		res := newRes("default", fmt.Sprintf("r%d", i), "u")
		res.Owner = owner.GetId()
		if err := b.Store().Restore(uint64(100+i), []*pbresource.Resource{owner, res}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

func equalResources(a, b []*pbresource.Resource) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !proto.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}
