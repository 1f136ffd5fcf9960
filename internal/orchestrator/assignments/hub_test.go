package assignments

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/testlog"
)

// harness is a hub over the real resource service on an in-memory store.
type harness struct {
	t   *testing.T
	api resource.API
	hub *Hub
}

func newHarness(t *testing.T, buffer int) *harness {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	svc := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg, Logger: testlog.Logger(t)})
	if err := core.Bootstrap(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	hub := NewHub(svc, testlog.Logger(t))
	if buffer > 0 {
		hub.buffer = buffer
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- hub.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("hub: %v", err)
		}
	})
	return &harness{t: t, api: svc, hub: hub}
}

func (h *harness) place(name, instance string) {
	h.t.Helper()
	data, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: instance, StartedBy: "test"})
	out, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", name), Data: data}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.caughtUp(out.GetResource().GetVersion())
}

// caughtUp waits until the hub has applied the write at version (the
// store's index): the hub follows the store, a little behind it.
func (h *harness) caughtUp(version string) {
	h.t.Helper()
	want, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		h.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.hub.mu.Lock()
		at := h.hub.index
		h.hub.mu.Unlock()
		if at >= want {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the hub is at index %d, not %d", at, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) remove(name string) {
	h.t.Helper()
	if _, err := h.api.Delete(context.Background(), &pbresource.DeleteRequest{Id: orchestrator.TaskID("default", name)}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) subscribe(instance string) ([]*pbresource.Resource, *Subscription) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, _, sub, err := h.hub.Subscribe(ctx, instance, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(sub.Close)
	return snap, sub
}

// next reads the subscription's next event, with a deadline.
func next(t *testing.T, sub *Subscription) (*pbresource.WatchEvent, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return sub.Next(ctx)
}

func names(rs []*pbresource.Resource) map[string]bool {
	out := map[string]bool{}
	for _, r := range rs {
		out[r.GetId().GetName()] = true
	}
	return out
}

// Each subscriber gets its own instance's tasks only: a snapshot, then the
// changes, in order.
func TestSubscribersSeeTheirInstanceOnly(t *testing.T) {
	h := newHarness(t, 0)
	h.place("a1", "i-1")
	h.place("b1", "i-2")
	h.place("a2", "i-1")

	snap, sub := h.subscribe("i-1")
	if got := names(snap); len(got) != 2 || !got["a1"] || !got["a2"] {
		t.Fatalf("snapshot of i-1: %v", got)
	}
	h.place("b2", "i-2") // not i-1's: never sent
	h.place("a3", "i-1")
	h.remove("a1")
	ev, err := next(t, sub)
	if err != nil || ev.GetOp() != pbresource.WatchEvent_OP_UPSERT || ev.GetResource().GetId().GetName() != "a3" {
		t.Fatalf("first event: %v, %v; want the upsert of a3", ev, err)
	}
	ev, err = next(t, sub)
	if err != nil || ev.GetOp() != pbresource.WatchEvent_OP_DELETE || ev.GetResource().GetId().GetName() != "a1" {
		t.Fatalf("second event: %v, %v; want the delete of a1", ev, err)
	}
	snap2, _ := h.subscribe("i-2")
	if got := names(snap2); len(got) != 2 || !got["b1"] || !got["b2"] {
		t.Fatalf("snapshot of i-2: %v", got)
	}
	if snap3, _ := h.subscribe("i-9"); len(snap3) != 0 {
		t.Fatalf("an instance without tasks: %v", snap3)
	}
}

// A task deleted and placed again under the same name on another instance
// leaves the first instance's stream and enters the second's.
func TestTaskPlacedAgainElsewhere(t *testing.T) {
	h := newHarness(t, 0)
	h.place("t", "i-1")
	_, sub1 := h.subscribe("i-1")
	_, sub2 := h.subscribe("i-2")
	h.remove("t")
	h.place("t", "i-2")
	if ev, err := next(t, sub1); err != nil || ev.GetOp() != pbresource.WatchEvent_OP_DELETE {
		t.Fatalf("i-1: %v, %v; want the delete", ev, err)
	}
	if ev, err := next(t, sub2); err != nil || ev.GetOp() != pbresource.WatchEvent_OP_UPSERT || ev.GetResource().GetId().GetName() != "t" {
		t.Fatalf("i-2: %v, %v; want the upsert", ev, err)
	}
}

// A subscriber that does not keep up is ended with OutOfRange after the
// events it had, not allowed to hold the hub up.
func TestSlowSubscriberIsEnded(t *testing.T) {
	h := newHarness(t, 2)
	_, slow := h.subscribe("i-1")
	_, other := h.subscribe("i-2")
	for _, n := range []string{"a", "b", "c", "d"} {
		h.place(n, "i-1")
	}
	h.place("z", "i-2")
	if ev, err := next(t, other); err != nil || ev.GetResource().GetId().GetName() != "z" {
		t.Fatalf("the other subscriber: %v, %v", ev, err)
	}
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

// When the hub lists again, every subscriber is told to start over, and a
// new subscription sees the listing.
func TestResetEndsSubscribers(t *testing.T) {
	h := newHarness(t, 0)
	h.place("a", "i-1")
	_, sub := h.subscribe("i-1")
	h.hub.reset()
	if _, err := next(t, sub); !errors.Is(err, ErrRestarting) || !resource.NeedsRelist(err) {
		t.Fatalf("after a reset: %v, want ErrRestarting (OutOfRange)", err)
	}
	// The hub is not ready until its next listing; its watch still runs,
	// so a reset alone leaves it waiting. Feed it a fresh snapshot the way
	// its watch would after starting over.
	h.hub.apply(&pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_END_OF_SNAPSHOT})
	if snap, _ := h.subscribe("i-1"); len(snap) != 0 {
		t.Fatalf("snapshot after a reset with nothing listed again: %v", snap)
	}
}

// An agent's own report is not streamed back to it: it has the change from
// its write. A change by anyone else (a stop asked for, the servers
// marking the task LOST) is.
func TestAgentReportsAreNotEchoed(t *testing.T) {
	h := newHarness(t, 0)
	h.place("t", "i-1")
	_, sub := h.subscribe("i-1")
	edit := func(f func(*pborch.Task)) {
		t.Helper()
		resp, err := h.api.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.TaskID("default", "t")})
		if err != nil {
			t.Fatal(err)
		}
		res := resp.GetResource()
		tk, err := resource.DecodeData[*pborch.Task](res)
		if err != nil {
			t.Fatal(err)
		}
		f(tk)
		res.Data, _ = anypb.New(tk)
		out, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: res})
		if err != nil {
			t.Fatal(err)
		}
		h.caughtUp(out.GetResource().GetVersion())
	}
	edit(func(tk *pborch.Task) { // the agent reports it running
		tk.LastStatus, tk.Session, tk.ReportedAt = "RUNNING", "s1", timestamppb.Now()
	})
	edit(func(tk *pborch.Task) { tk.DesiredStatus = "STOPPED" }) // a stop, asked for
	ev, err := next(t, sub)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := resource.DecodeData[*pborch.Task](ev.GetResource()); got.GetDesiredStatus() != "STOPPED" || got.GetLastStatus() != "RUNNING" {
		t.Fatalf("first event after the report = %v; want the stop (the report itself not echoed)", got)
	}
	edit(func(tk *pborch.Task) { tk.LastStatus, tk.StopReason = "LOST", "instance i-1 down" }) // the servers
	ev, err = next(t, sub)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := resource.DecodeData[*pborch.Task](ev.GetResource()); got.GetLastStatus() != "LOST" {
		t.Fatalf("event after the servers marked it lost = %v; want it streamed", got)
	}
}

// TestSubscribeNeverShowsAnOlderView: a subscriber that has seen index N
// gets a snapshot as of N or later. Writes of other types move the hub's
// index too (the store's progress marks), so a hub whose view is current
// serves it at once; a view that cannot reach N in time is refused, as
// Unavailable (this server is behind) or DataLoss (the cluster never
// committed N).
func TestSubscribeNeverShowsAnOlderView(t *testing.T) {
	h := newHarness(t, 0)
	h.place("t1", "i1")
	// A write of another type: no task event, but the view is current as
	// of its index.
	nsData, _ := anypb.New(&pbcore.Namespace{})
	ns, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: &pbresource.ID{Type: core.NamespaceType, Name: "other"}, Data: nsData}})
	if err != nil {
		t.Fatal(err)
	}
	seen, _ := strconv.ParseUint(ns.GetResource().GetVersion(), 10, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap, index, sub, err := h.hub.Subscribe(ctx, "i1", seen)
	if err != nil {
		t.Fatalf("subscribe from the current index %d: %v", seen, err)
	}
	sub.Close()
	if index < seen || len(snap) != 1 {
		t.Fatalf("snapshot at index %d with %d tasks; want at least %d with t1", index, len(snap), seen)
	}

	h.hub.minIndexWait = 50 * time.Millisecond
	_, _, _, err = h.hub.Subscribe(ctx, "i1", seen+1000)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("subscribe from an index the view has not reached: %v; want Unavailable", err)
	}
	h.hub.SetClusterIndex(func(context.Context) (uint64, error) { return seen, nil })
	_, _, _, err = h.hub.Subscribe(ctx, "i1", seen+1000)
	if status.Code(err) != codes.DataLoss {
		t.Fatalf("subscribe from an index the cluster never committed: %v; want DataLoss", err)
	}

	// A subscriber that waits gets its snapshot once the view gets there.
	h.hub.minIndexWait = 10 * time.Second
	type result struct {
		index uint64
		err   error
	}
	got := make(chan result, 1)
	go func() {
		_, index, sub, err := h.hub.Subscribe(ctx, "i1", seen+1)
		if err == nil {
			sub.Close()
		}
		got <- result{index, err}
	}()
	h.place("t2", "i2")
	if r := <-got; r.err != nil || r.index < seen+1 {
		t.Fatalf("subscribe that waited: index %d, %v", r.index, r.err)
	}
}
