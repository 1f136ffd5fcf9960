package assignments

import (
	"context"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/fanout"
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

func newHarness(t *testing.T) *harness {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	svc := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg, Logger: testlog.Logger(t)})
	if err := core.Bootstrap(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	hub, err := NewHub(svc, nil, testlog.Logger(t))
	if err != nil {
		t.Fatal(err)
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
		at := h.hub.fan.Index()
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

func (h *harness) subscribe(instance string) ([]*pbresource.Resource, *fanout.Subscription[string]) {
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
func next(t *testing.T, sub *fanout.Subscription[string]) (*pbresource.WatchEvent, error) {
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
	h := newHarness(t)
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

// An agent's own report is not streamed back to it: it has the change from
// its write. A change by anyone else (a stop asked for, the servers
// marking the task LOST) is.
func TestAgentReportsAreNotEchoed(t *testing.T) {
	h := newHarness(t)
	h.place("t", "i-1")
	_, sub := h.subscribe("i-1")
	read := func() *pbresource.Resource {
		t.Helper()
		resp, err := h.api.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.TaskID("default", "t")})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetResource()
	}
	edit := func(f func(*pborch.Task)) { // the task's data
		t.Helper()
		res := read()
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
	report := func(f func(*pborch.TaskStatus)) { // its status["agent"]
		t.Helper()
		res := read()
		st := proto.Clone(orchestrator.TaskStatusOf(res)).(*pborch.TaskStatus)
		f(st)
		payload, _ := anypb.New(st)
		task, _ := resource.DecodeData[*pborch.Task](res)
		out, err := h.api.WriteStatus(resource.AsAgent(context.Background(), task.GetInstance()), &pbresource.WriteStatusRequest{Id: res.GetId(), Version: res.GetVersion(),
			Key: orchestrator.TaskStatusKey, Status: &pbresource.Status{Data: payload}})
		if err != nil {
			t.Fatal(err)
		}
		h.caughtUp(out.GetResource().GetVersion())
	}
	report(func(st *pborch.TaskStatus) { // the agent reports it running
		st.LastStatus, st.Session, st.ReportedAt = "RUNNING", "s1", timestamppb.Now()
	})
	edit(func(tk *pborch.Task) { tk.DesiredStatus = "STOPPED" }) // a stop, asked for
	ev, err := next(t, sub)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := resource.DecodeData[*pborch.Task](ev.GetResource()); got.GetDesiredStatus() != "STOPPED" || orchestrator.TaskStatusOf(ev.GetResource()).GetLastStatus() != "RUNNING" {
		t.Fatalf("first event after the report = %v; want the stop (the report itself not echoed)", ev.GetResource())
	}
	report(func(st *pborch.TaskStatus) { st.LastStatus, st.StopReason = "LOST", "instance i-1 down" }) // the servers
	ev, err = next(t, sub)
	if err != nil {
		t.Fatal(err)
	}
	if got := orchestrator.TaskStatusOf(ev.GetResource()); got.GetLastStatus() != "LOST" {
		t.Fatalf("event after the servers marked it lost = %v; want it streamed", got)
	}
}

// A task is streamed to the instance it is placed on; an unplaced task,
// or one whose data does not decode, to nobody.
func TestKeyOfTask(t *testing.T) {
	placed, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: "i-1", StartedBy: "test"})
	unplaced, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", StartedBy: "test"})
	other, _ := anypb.New(&pbcore.Namespace{})
	for _, tc := range []struct {
		name string
		data *anypb.Any
		want string
		ok   bool
	}{
		{"placed", placed, "i-1", true},
		{"not placed", unplaced, "", false},
		{"not a task", other, "", false},
		{"no data", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := keyOfTask(taskOf(&pbresource.Resource{Id: orchestrator.TaskID("default", "t"), Data: tc.data}))
			if got != tc.want || ok != tc.ok {
				t.Fatalf("key = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
