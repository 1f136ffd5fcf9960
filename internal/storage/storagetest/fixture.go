package storagetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

// waitTimeout bounds every wait for a lagging copy to catch up or for a
// watch event to arrive. It is only a failure bound: nothing waits for it
// to pass when things work.
const waitTimeout = 30 * time.Second

// pollInterval is the pause between two looks at a condition being polled.
const pollInterval = 2 * time.Millisecond

var uidSeq atomic.Uint64

// newUID returns a uid no other resource of this process has.
func newUID() string { return fmt.Sprintf("uid-%06d", uidSeq.Add(1)) }

// testType is a type of the suite's own group; each subtest passes its own
// kind so that subtests never see each other's resources.
func testType(kind string) *pbresource.Type {
	return &pbresource.Type{Group: "storagetest", GroupVersion: "v1", Kind: kind}
}

func tenancy(ns string) *pbresource.Tenancy { return &pbresource.Tenancy{Namespace: ns} }

func id(typ *pbresource.Type, ns, name string) *pbresource.ID {
	return &pbresource.ID{Type: typ, Tenancy: tenancy(ns), Name: name}
}

// newResource returns a resource to create: a fresh uid, no version, and
// data and metadata that say what it was written as.
func newResource(typ *pbresource.Type, ns, name string) *pbresource.Resource {
	i := id(typ, ns, name)
	i.Uid = newUID()
	return withData(&pbresource.Resource{Id: i}, "created "+name)
}

// withData returns a copy of res whose data and metadata carry text.
func withData(res *pbresource.Resource, text string) *pbresource.Resource {
	c := proto.Clone(res).(*pbresource.Resource)
	data, err := anypb.New(wrapperspb.String(text))
	if err != nil {
		panic(err) // a string wrapper always marshals
	}
	c.Data = data
	c.Metadata = map[string]string{"text": text}
	return c
}

// withVersion returns a copy of res carrying version.
func withVersion(res *pbresource.Resource, version string) *pbresource.Resource {
	c := proto.Clone(res).(*pbresource.Resource)
	c.Version = version
	return c
}

// withUID returns a copy of res whose id has uid.
func withUID(res *pbresource.Resource, uid string) *pbresource.Resource {
	c := proto.Clone(res).(*pbresource.Resource)
	c.Id.Uid = uid
	return c
}

func idWithUID(i *pbresource.ID, uid string) *pbresource.ID {
	c := proto.Clone(i).(*pbresource.ID)
	c.Uid = uid
	return c
}

func describe(res *pbresource.Resource) string {
	if res == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s (uid %q, version %q)", ids.String(res.GetId()), res.GetId().GetUid(), res.GetVersion())
}

func describeEvent(ev *pbresource.WatchEvent) string {
	if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
		return fmt.Sprintf("END_OF_SNAPSHOT@%d", ev.GetIndex())
	}
	return fmt.Sprintf("%s %s@%d", strings.TrimPrefix(ev.GetOp().String(), "OP_"), describe(ev.GetResource()), ev.GetIndex())
}

// mustWrite writes res and fails the test on error.
func mustWrite(t *testing.T, b storage.Backend, res *pbresource.Resource) *pbresource.Resource {
	t.Helper()
	out, err := b.WriteCAS(t.Context(), res)
	if err != nil {
		t.Fatalf("WriteCAS(%s): %v", describe(res), err)
	}
	if out.GetVersion() == "" {
		t.Fatalf("WriteCAS(%s) returned an empty version", describe(res))
	}
	return out
}

// mustDelete deletes i at version and fails the test on error.
func mustDelete(t *testing.T, b storage.Backend, i *pbresource.ID, version string) {
	t.Helper()
	if err := b.DeleteCAS(t.Context(), i, version); err != nil {
		t.Fatalf("DeleteCAS(%s, %q): %v", ids.String(i), version, err)
	}
}

// requireStored checks with a strong read that exactly want is stored.
func requireStored(t *testing.T, b storage.Backend, want *pbresource.Resource) {
	t.Helper()
	got, err := b.Read(t.Context(), storage.StrongConsistency, want.GetId())
	if err != nil {
		t.Fatalf("strong Read(%s): %v", describe(want), err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("strong Read(%s):\n got %v\nwant %v", ids.String(want.GetId()), got, want)
	}
}

// requireAbsent checks with a strong read that nothing is stored under i.
func requireAbsent(t *testing.T, b storage.Backend, i *pbresource.ID) {
	t.Helper()
	got, err := b.Read(t.Context(), storage.StrongConsistency, idWithUID(i, ""))
	if !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("strong Read(%s) = %s, %v; want ErrNotFound", ids.String(i), describe(got), err)
	}
}

// poll calls cond until it reports true, failing the test with cond's last
// explanation when waitTimeout passes first.
func poll(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", waitTimeout, what, why)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("test ended while waiting for %s: %s", what, why)
		case <-time.After(pollInterval):
		}
	}
}

// waitApplied waits until an eventually consistent read of i shows version
// (or, with version "", shows nothing stored). A backend's local copy
// applies changes in order, so afterwards every local read reflects every
// change made up to that one.
func waitApplied(t *testing.T, b storage.Backend, i *pbresource.ID, version string) {
	t.Helper()
	poll(t, fmt.Sprintf("the local copy to apply %s at version %q", ids.String(i), version), func() (bool, string) {
		got, err := b.Read(t.Context(), storage.EventualConsistency, idWithUID(i, ""))
		switch {
		case version == "" && errors.Is(err, storage.ErrNotFound):
			return true, ""
		case err != nil:
			return false, fmt.Sprintf("eventual Read: %v", err)
		case got.GetVersion() == version:
			return true, ""
		}
		return false, fmt.Sprintf("eventual Read shows version %q", got.GetVersion())
	})
}

// openWatch starts a watch that is closed when the test ends.
func openWatch(t *testing.T, b storage.Backend, typ *pbresource.Type, ns, prefix string, since uint64) storage.Watch {
	t.Helper()
	w, err := b.WatchList(t.Context(), typ, tenancy(ns), prefix, since)
	if err != nil {
		t.Fatalf("WatchList(%s, %q, %q, %d): %v", ids.TypeString(typ), ns, prefix, since, err)
	}
	t.Cleanup(w.Close)
	return w
}

// next returns the watch's next event, failing the test when none arrives
// within waitTimeout.
func next(t *testing.T, w storage.Watch) *pbresource.WatchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	ev, err := w.Next(ctx)
	if err != nil {
		t.Fatalf("watch Next: %v", err)
	}
	if ev == nil {
		t.Fatal("watch Next returned neither an event nor an error")
	}
	return ev
}

// readSnapshot reads upserts up to END_OF_SNAPSHOT and returns them with
// the END_OF_SNAPSHOT event.
func readSnapshot(t *testing.T, w storage.Watch) ([]*pbresource.WatchEvent, *pbresource.WatchEvent) {
	t.Helper()
	var upserts []*pbresource.WatchEvent
	for {
		ev := next(t, w)
		switch ev.GetOp() {
		case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
			return upserts, ev
		case pbresource.WatchEvent_OP_UPSERT:
			upserts = append(upserts, ev)
		default:
			t.Fatalf("before END_OF_SNAPSHOT of a new watch: got %s, want only upserts", describeEvent(ev))
		}
	}
}

// expectEvent reads the next event and checks it is op on exactly res.
func expectEvent(t *testing.T, w storage.Watch, op pbresource.WatchEvent_Op, res *pbresource.Resource) *pbresource.WatchEvent {
	t.Helper()
	ev := next(t, w)
	if ev.GetOp() != op || !proto.Equal(ev.GetResource(), res) {
		t.Fatalf("watch event:\n got %s: %v\nwant %s %s: %v", describeEvent(ev), ev.GetResource(), op, describe(res), res)
	}
	return ev
}

// expectEnd reads the next event and checks it is END_OF_SNAPSHOT.
func expectEnd(t *testing.T, w storage.Watch) *pbresource.WatchEvent {
	t.Helper()
	ev := next(t, w)
	if ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
		t.Fatalf("watch event: got %s, want END_OF_SNAPSHOT", describeEvent(ev))
	}
	return ev
}
