package inmem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// change is one acknowledged write or delete, as its writer saw it.
type change struct {
	op      pbresource.WatchEvent_Op
	name    string
	version string // of the upsert; of the deleted resource for a delete
}

// watchLog is what one watcher saw.
type watchLog struct {
	snapshot []*pbresource.Resource
	end      uint64
	live     []*pbresource.WatchEvent
	err      error
}

// TestConcurrentWritersReadersWatchers runs writers, readers and watchers at
// once. Each writer owns its names, so all its CAS writes must succeed; every
// watcher that started before the writes must see every change exactly once
// and in index order, and every watcher, whenever it started, must end up
// with the state the store holds.
func TestConcurrentWritersReadersWatchers(t *testing.T) {
	const writers, opsPerWriter, namesPerWriter = 4, 120, 5
	const earlyWatchers, lateWatchers, readers = 3, 3, 2
	ctx := context.Background()
	// A watcher missing its sentinel fails at this deadline instead of
	// hanging the test.
	watchCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	b := NewBackend()
	sentinel := newRes("zz", "sentinel", "u")

	watchUntilSentinel := func(w storage.Watch, log *watchLog) {
		defer w.Close()
		// A late watcher may start after the sentinel was written and find
		// it in its snapshot; then it is done at END_OF_SNAPSHOT.
		sawEnd, sawSentinel := false, false
		for {
			ev, err := w.Next(watchCtx)
			if err != nil {
				log.err = err
				return
			}
			switch {
			case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
				log.end, sawEnd = ev.GetIndex(), true
				if sawSentinel {
					return
				}
			case ids.SameName(ev.GetResource().GetId(), sentinel.GetId()):
				if sawEnd {
					return
				}
				sawSentinel = true
			case !sawEnd:
				log.snapshot = append(log.snapshot, ev.GetResource())
			default:
				log.live = append(log.live, ev)
			}
		}
	}

	var wg sync.WaitGroup
	early := make([]watchLog, earlyWatchers)
	for i := range early {
		w := openWatch(t, b, 0)
		wg.Go(func() { watchUntilSentinel(w, &early[i]) })
	}
	late := make([]watchLog, lateWatchers)
	start := make(chan struct{})
	for i := range late {
		wg.Go(func() {
			<-start
			w, err := b.WatchList(ctx, testTyp, wildcard, "", 0)
			if err != nil {
				late[i].err = err
				return
			}
			watchUntilSentinel(w, &late[i])
		})
	}

	stopReading := make(chan struct{})
	var readersWG sync.WaitGroup
	for range readers {
		readersWG.Go(func() {
			for {
				select {
				case <-stopReading:
					return
				default:
				}
				list, err := b.List(ctx, storage.EventualConsistency, testTyp, wildcard, "")
				if err != nil {
					t.Errorf("List: %v", err)
					return
				}
				if !slices.IsSortedFunc(list, func(a, b *pbresource.Resource) int {
					return compareNames(a.GetId(), b.GetId())
				}) {
					t.Errorf("List is not ordered by namespace and name")
				}
				// A read after the list never shows an older version (versions
				// are the store's index).
				for _, res := range list {
					got, err := b.Read(ctx, storage.StrongConsistency, res.GetId())
					switch {
					case errors.Is(err, storage.ErrNotFound), errors.Is(err, storage.ErrWrongUID):
					case err != nil:
						t.Errorf("Read(%s): %v", res.GetId().GetName(), err)
					case versionNumber(t, got) < versionNumber(t, res):
						t.Errorf("Read of %s after List went back from version %s to %s", res.GetId().GetName(), res.GetVersion(), got.GetVersion())
					}
				}
			}
		})
	}

	changes := make([][]change, writers)
	var writersWG sync.WaitGroup
	for wi := range writers {
		writersWG.Go(func() {
			current := map[string]*pbresource.Resource{}
			for op := range opsPerWriter {
				if wi == 0 && op == opsPerWriter/3 {
					close(start) // the late watchers start in the middle of the writes
				}
				name := fmt.Sprintf("w%d-%d", wi, op%namesPerWriter)
				cur := current[name]
				switch {
				case cur == nil:
					res, err := b.WriteCAS(ctx, newRes(fmt.Sprintf("ns%d", op%2), name, fmt.Sprintf("u%d", op)))
					if err != nil {
						t.Errorf("create %s: %v", name, err)
						return
					}
					current[name] = res
					changes[wi] = append(changes[wi], change{pbresource.WatchEvent_OP_UPSERT, name, res.GetVersion()})
				case op%3 == 0:
					if err := b.DeleteCAS(ctx, cur.GetId(), cur.GetVersion()); err != nil {
						t.Errorf("delete %s: %v", name, err)
						return
					}
					delete(current, name)
					changes[wi] = append(changes[wi], change{pbresource.WatchEvent_OP_DELETE, name, cur.GetVersion()})
				default:
					upd := proto.Clone(cur).(*pbresource.Resource)
					upd.Metadata = map[string]string{"op": fmt.Sprint(op)}
					res, err := b.WriteCAS(ctx, upd)
					if err != nil {
						t.Errorf("update %s: %v", name, err)
						return
					}
					current[name] = res
					changes[wi] = append(changes[wi], change{pbresource.WatchEvent_OP_UPSERT, name, res.GetVersion()})
				}
			}
		})
	}
	writersWG.Wait()
	write(t, b, sentinel)
	wg.Wait()
	close(stopReading)
	readersWG.Wait()
	if t.Failed() {
		return
	}

	final, err := b.List(ctx, storage.StrongConsistency, testTyp, wildcard, "")
	if err != nil {
		t.Fatal(err)
	}
	finalState := map[string]string{}
	for _, res := range final {
		if res.GetId().GetName() != sentinel.GetId().GetName() {
			finalState[res.GetId().GetName()] = res.GetVersion()
		}
	}

	total := 0
	for _, cs := range changes {
		total += len(cs)
	}
	for i, log := range early {
		if log.err != nil {
			t.Fatalf("early watcher %d ended: %v", i, log.err)
		}
		if len(log.snapshot) != 0 || len(log.live) != total {
			t.Fatalf("early watcher %d saw %d snapshot and %d live events; want 0 and %d", i, len(log.snapshot), len(log.live), total)
		}
		checkIncreasing(t, fmt.Sprintf("early watcher %d", i), log)
		if i > 0 && !slices.EqualFunc(log.live, early[0].live, func(a, b *pbresource.WatchEvent) bool { return a == b }) {
			t.Fatalf("early watchers 0 and %d saw different streams", i)
		}
		// Per name, the events are exactly the writer's changes, in order.
		for wi, cs := range changes {
			for n := range namesPerWriter {
				name := fmt.Sprintf("w%d-%d", wi, n)
				var want, got []change
				for _, c := range cs {
					if c.name == name {
						want = append(want, c)
					}
				}
				for _, ev := range log.live {
					if ev.GetResource().GetId().GetName() == name {
						got = append(got, change{ev.GetOp(), name, ev.GetResource().GetVersion()})
					}
				}
				if !slices.Equal(got, want) {
					t.Fatalf("early watcher %d, %s:\n got %v\nwant %v", i, name, got, want)
				}
			}
		}
	}
	for i, log := range append(early, late...) {
		if log.err != nil {
			t.Fatalf("watcher %d ended: %v", i, log.err)
		}
		checkIncreasing(t, fmt.Sprintf("watcher %d", i), log)
		state := map[string]string{}
		for _, res := range log.snapshot {
			if versionNumber(t, res) > log.end {
				t.Fatalf("watcher %d: snapshot holds %s at version %s, after its END_OF_SNAPSHOT@%d", i, res.GetId().GetName(), res.GetVersion(), log.end)
			}
			state[res.GetId().GetName()] = res.GetVersion()
		}
		for _, ev := range log.live {
			if ev.GetOp() == pbresource.WatchEvent_OP_DELETE {
				delete(state, ev.GetResource().GetId().GetName())
			} else {
				state[ev.GetResource().GetId().GetName()] = ev.GetResource().GetVersion()
			}
		}
		if !mapsEqual(state, finalState) {
			t.Fatalf("watcher %d (snapshot of %d at %d, %d live events) rebuilt\n %v\nbut the store holds\n %v",
				i, len(log.snapshot), log.end, len(log.live), state, finalState)
		}
	}
}

func versionNumber(t *testing.T, res *pbresource.Resource) uint64 {
	n, err := strconv.ParseUint(res.GetVersion(), 10, 64)
	if err != nil {
		t.Errorf("version %q is not an index: %v", res.GetVersion(), err)
	}
	return n
}

func checkIncreasing(t *testing.T, who string, log watchLog) {
	t.Helper()
	last := log.end
	for _, ev := range log.live {
		if ev.GetIndex() <= last {
			t.Fatalf("%s: event %s after index %d", who, evString(ev), last)
		}
		last = ev.GetIndex()
	}
}

func compareNames(a, b *pbresource.ID) int {
	if c := cmpString(a.GetTenancy().GetNamespace(), b.GetTenancy().GetNamespace()); c != 0 {
		return c
	}
	return cmpString(a.GetName(), b.GetName())
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
