package session

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// seenTasks is a task manager that records what the session hands it.
type seenTasks struct {
	mu       sync.Mutex
	observed []string   // names, in order, of single tasks observed
	listings [][]string // names of each listing, whole
}

func (r *seenTasks) LearnDefinition(*pbresource.Resource) {}
func (r *seenTasks) Observe(res *pbresource.Resource, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observed = append(r.observed, res.GetId().GetName())
}
func (r *seenTasks) ObserveListing(listing []*pbresource.Resource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for _, res := range listing {
		names = append(names, res.GetId().GetName())
	}
	r.listings = append(r.listings, names)
}
func (r *seenTasks) Resync(string) {}
func (r *seenTasks) Attach(context.Context, DefinitionReader) func() {
	return func() {}
}
func (r *seenTasks) Reports() []Report                    { return nil }
func (r *seenTasks) Written(Report, *pbresource.Resource) {}
func (r *seenTasks) ReportsWaiting() <-chan struct{}      { return nil }
func (r *seenTasks) taken() (observed int, listings [][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.observed), append([][]string(nil), r.listings...)
}

// scriptedStream hands out events one by one; after the last it waits
// for release, then fails as a cut stream does.
type scriptedStream struct {
	events  []*pbresource.WatchEvent
	read    chan struct{} // closed once the last event is read
	release chan struct{}
}

func (s *scriptedStream) Recv() (*pbresource.WatchEvent, error) {
	if len(s.events) == 0 {
		<-s.release
		return nil, status.Error(codes.Unavailable, "the stream was cut")
	}
	ev := s.events[0]
	s.events = s.events[1:]
	if len(s.events) == 0 {
		close(s.read)
	}
	return ev, nil
}

// taskEvent is an event of task name; last, when set, is the status its
// agent reported.
func taskEvent(op pbresource.WatchEvent_Op, index uint64, name string, tk *pborch.Task, last ...string) *pbresource.WatchEvent {
	ev := &pbresource.WatchEvent{Op: op, Index: index}
	if tk != nil {
		data, _ := anypb.New(tk)
		ev.Resource = &pbresource.Resource{Id: &pbresource.ID{Name: name, Uid: name + "-uid", Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}}, Generation: 1, Data: data}
		if len(last) > 0 {
			payload, _ := anypb.New(&pborch.TaskStatus{LastStatus: last[0]})
			ev.Resource.Status = map[string]*pbresource.Status{orchestrator.TaskStatusKey: {Data: payload}}
		}
	}
	return ev
}

// A fresh listing is acted on only once it is whole: an agent that lost
// its local state must not start (and report) a replacement before it has
// heard of the task it replaces, which the listing may bring later. The
// session hands the task manager nothing of a listing cut before its end.
func TestAListingIsActedOnOnlyWhole(t *testing.T) {
	tasks := &seenTasks{}
	s := New(Config{Name: "i-1"}, tasks)
	// The replacement comes first, the task it replaces (lost with the
	// instance while the agent was away) after it; the listing is cut
	// before its end.
	stream := &scriptedStream{read: make(chan struct{}), release: make(chan struct{}), events: []*pbresource.WatchEvent{
		taskEvent(pbresource.WatchEvent_OP_UPSERT, 7, "ls-2", &pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", Environment: "ls", Replaces: "ls-1",
			DesiredStatus: orchestrator.StatusRunning}),
		taskEvent(pbresource.WatchEvent_OP_UPSERT, 7, "ls-1", &pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", Environment: "ls",
			DesiredStatus: orchestrator.StatusStopped}, orchestrator.StatusLost),
	}}
	done := make(chan error, 1)
	go func() { done <- s.consume(stream) }()
	<-stream.read
	observed, listings := tasks.taken()
	close(stream.release)
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Fatalf("consume ended with %v, want the cut stream's error", err)
	}
	if observed != 0 || len(listings) != 0 {
		t.Fatalf("%d tasks and %d listings were handed over before the listing ended, want none", observed, len(listings))
	}
	if observed, listings := tasks.taken(); observed != 0 || len(listings) != 0 {
		t.Fatalf("a cut listing handed over %d tasks and %d listings, want none (it is listed again)", observed, len(listings))
	}

	// Whole, it is handed over at its end, in one piece; what follows
	// comes task by task, and the view index moves with every event.
	stream = &scriptedStream{read: make(chan struct{}), release: make(chan struct{})}
	stream.events = []*pbresource.WatchEvent{
		taskEvent(pbresource.WatchEvent_OP_UPSERT, 7, "ls-2", &pborch.Task{Instance: "i-1"}),
		taskEvent(pbresource.WatchEvent_OP_UPSERT, 7, "ls-1", &pborch.Task{Instance: "i-1"}),
		taskEvent(pbresource.WatchEvent_OP_END_OF_SNAPSHOT, 7, "", nil),
		taskEvent(pbresource.WatchEvent_OP_UPSERT, 9, "ls-3", &pborch.Task{Instance: "i-1"}),
	}
	go func() { done <- s.consume(stream) }()
	<-stream.read
	close(stream.release)
	<-done
	if observed, listings := tasks.taken(); observed != 1 || len(listings) != 1 || len(listings[0]) != 2 {
		t.Fatalf("handed over %d tasks and listings %v, want one listing of ls-2 and ls-1, then ls-3", observed, listings)
	}
	if got := s.ViewIndex(); got != 9 {
		t.Errorf("view index %d after the stream, want 9", got)
	}

	// A listing older than what the agent has seen is refused, whole.
	stream = &scriptedStream{read: make(chan struct{}), release: make(chan struct{}), events: []*pbresource.WatchEvent{
		taskEvent(pbresource.WatchEvent_OP_UPSERT, 8, "ls-2", &pborch.Task{Instance: "i-1"}),
	}}
	close(stream.release)
	if err := s.consume(stream); status.Code(err) != codes.Unavailable {
		t.Fatalf("an older listing: consume = %v, want Unavailable (the agent moves to another server)", err)
	}
	if _, listings := tasks.taken(); len(listings) != 1 {
		t.Fatalf("an older listing was handed over: %v", listings)
	}
}
