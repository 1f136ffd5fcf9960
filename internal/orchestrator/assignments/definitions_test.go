package assignments

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
)

// eventStream is a WatchTasks server stream that hands what is sent to the
// test.
type eventStream struct {
	grpc.ServerStream
	ctx    context.Context
	events chan *pbresource.WatchEvent
}

func (s *eventStream) Context() context.Context { return s.ctx }

func (s *eventStream) Send(ev *pbresource.WatchEvent) error {
	select {
	case s.events <- ev:
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// watchTasks runs WatchTasks for instance until the test ends.
func (h *harness) watchTasks(instance string, withDefinitions bool) *eventStream {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &eventStream{ctx: ctx, events: make(chan *pbresource.WatchEvent, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.hub.WatchTasks(&pbagent.WatchTasksRequest{Instance: instance, WithDefinitions: withDefinitions}, s)
	}()
	h.t.Cleanup(func() { cancel(); <-done })
	return s
}

// expect reads the stream's next events and checks each is what want
// names: "def:NAME" for a task definition, "task:NAME", or "end".
func (s *eventStream) expect(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		var ev *pbresource.WatchEvent
		select {
		case ev = <-s.events:
		case <-time.After(10 * time.Second):
			t.Fatalf("no event; want %s", w)
		}
		got := "end"
		switch {
		case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
		case ids.SameType(ev.GetResource().GetId().GetType(), orchestrator.TaskDefinitionType):
			got = "def:" + ev.GetResource().GetId().GetName()
		default:
			got = "task:" + ev.GetResource().GetId().GetName()
		}
		if got != w {
			t.Fatalf("event %s (index %d); want %s", got, ev.GetIndex(), w)
		}
	}
}

func (h *harness) registerDefinition(family string, revision int64) {
	h.t.Helper()
	data, _ := anypb.New(&pborch.TaskDefinition{Family: family, Revision: revision,
		Containers: []*pborch.ContainerDefinition{{Name: "app", Driver: "exec", Command: []string{"sleep", "1000"}}}})
	_, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: orchestrator.TaskDefinitionID("default", family, revision), Data: data}})
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) placeOf(name, instance, ref string) {
	h.t.Helper()
	data, _ := anypb.New(&pborch.Task{TaskDefinition: ref, Instance: instance, StartedBy: "test"})
	out, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: orchestrator.TaskID("default", name), Data: data}})
	if err != nil {
		h.t.Fatal(err)
	}
	h.caughtUp(out.GetResource().GetVersion())
}

// A stream that asks for definitions gets each one once, right before the
// first task of it, in the snapshot and after; one the server cannot read
// is left out (the agent reads it itself). A stream that does not ask
// gets tasks only.
func TestStreamCarriesEachDefinitionOnce(t *testing.T) {
	h := newHarness(t)
	h.registerDefinition("web", 1)
	h.registerDefinition("web", 2)
	h.placeOf("t1", "i-1", "web:1")

	with := h.watchTasks("i-1", true)
	with.expect(t, "def:web-1", "task:t1", "end")
	without := h.watchTasks("i-1", false)
	without.expect(t, "task:t1", "end")

	h.placeOf("t2", "i-1", "web:1")
	with.expect(t, "task:t2")
	h.placeOf("t3", "i-1", "web:2")
	with.expect(t, "def:web-2", "task:t3")
	h.placeOf("t4", "i-1", "missing:1")
	with.expect(t, "task:t4")
	without.expect(t, "task:t2", "task:t3", "task:t4")

	// What a stream carried is its own: another one carries web:1 again.
	h.placeOf("t5", "i-2", "web:1")
	other := h.watchTasks("i-2", true)
	other.expect(t, "def:web-1", "task:t5", "end")
}
