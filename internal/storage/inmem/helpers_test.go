package inmem

import (
	"context"
	"fmt"
	"testing"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

var testTyp = &pbresource.Type{Group: "inmemtest", GroupVersion: "v1", Kind: "Thing"}

func testID(ns, name string) *pbresource.ID {
	return &pbresource.ID{Type: testTyp, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: name}
}

func newRes(ns, name, uid string) *pbresource.Resource {
	i := testID(ns, name)
	i.Uid = uid
	return &pbresource.Resource{Id: i}
}

func write(t testing.TB, b *Backend, res *pbresource.Resource) *pbresource.Resource {
	t.Helper()
	out, err := b.WriteCAS(context.Background(), res)
	if err != nil {
		t.Fatalf("WriteCAS(%s): %v", ids.String(res.GetId()), err)
	}
	return out
}

func openWatch(t testing.TB, b *Backend, since uint64) storage.Watch {
	t.Helper()
	w, err := b.WatchList(context.Background(), testTyp, &pbresource.Tenancy{Namespace: ids.WildcardNamespace}, "", since)
	if err != nil {
		t.Fatalf("WatchList(since %d): %v", since, err)
	}
	t.Cleanup(w.Close)
	return w
}

// nextEvent returns the next event; a watch in these tests always has one
// due, so the bound only turns a bug into a failure instead of a hang.
func nextEvent(t testing.TB, w storage.Watch) (*pbresource.WatchEvent, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev, err := w.Next(ctx)
	if err == context.DeadlineExceeded {
		t.Fatal("no event due")
	}
	return ev, err
}

func mustNext(t testing.TB, w storage.Watch) *pbresource.WatchEvent {
	t.Helper()
	ev, err := nextEvent(t, w)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

// skipSnapshot reads up to END_OF_SNAPSHOT and returns the snapshot.
func skipSnapshot(t testing.TB, w storage.Watch) []*pbresource.Resource {
	t.Helper()
	var out []*pbresource.Resource
	for {
		ev := mustNext(t, w)
		if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			return out
		}
		out = append(out, ev.GetResource())
	}
}

func evString(ev *pbresource.WatchEvent) string {
	return fmt.Sprintf("%s %s v%s @%d", ev.GetOp(), ev.GetResource().GetId().GetName(), ev.GetResource().GetVersion(), ev.GetIndex())
}

// watcherCount is how many watches the store feeds for testTyp.
func watcherCount(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers[keyOf(testTyp)])
}
