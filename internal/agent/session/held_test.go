package session

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// at gives ev's task the version v (its store index).
func at(ev *pbresource.WatchEvent, v string) *pbresource.WatchEvent {
	ev.Resource.Version = v
	return ev
}

// end is an END_OF_SNAPSHOT; resumed marks a resumed start's.
func end(index uint64, resumed bool) *pbresource.WatchEvent {
	return &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_END_OF_SNAPSHOT, Index: index, Resumed: resumed}
}

func definitionEvent(name string) *pbresource.WatchEvent {
	return &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_UPSERT, Resource: &pbresource.Resource{
		Id: &pbresource.ID{Type: orchestrator.TaskDefinitionType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name}}}
}

// run consumes events until the stream is cut after the last.
func run(t *testing.T, s *Session, events ...*pbresource.WatchEvent) error {
	t.Helper()
	stream := &scriptedStream{events: events, read: make(chan struct{}), release: make(chan struct{})}
	close(stream.release)
	return s.consume(stream)
}

// heldTasks is what the session would resume from: "name@version",
// sorted, and the definitions' names; nil when it would not resume.
func heldTasks(s *Session) (tasks, defs []string) {
	r := s.held.resume()
	if r == nil {
		return nil, nil
	}
	tasks, defs = []string{}, []string{}
	for _, t := range r.GetTasks() {
		tasks = append(tasks, t.GetId().GetName()+"@"+t.GetVersion())
	}
	for _, d := range r.GetDefinitions() {
		defs = append(defs, d.GetName())
	}
	slices.Sort(tasks)
	slices.Sort(defs)
	return tasks, defs
}

// chanStream hands out what is sent on it; closed, it fails as a cut
// stream does.
type chanStream chan *pbresource.WatchEvent

func (c chanStream) Recv() (*pbresource.WatchEvent, error) {
	ev, ok := <-c
	if !ok {
		return nil, status.Error(codes.Unavailable, "the stream was cut")
	}
	return ev, nil
}

func (r *seenTasks) lastListing() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.listings) == 0 {
		return nil
	}
	return r.listings[len(r.listings)-1]
}

// The agent resumes from what its streams showed it: nothing until it has
// taken in a whole listing; then every task, at the version it holds
// (its own reports' included), and the definitions carried. A resumed
// start (only what differs) is applied to what it holds and handed to
// the task manager whole, once it has ended, as a fresh listing would be:
// a task the start does not touch is kept, not swept as deleted.
func TestResumedStartIsHandedOverWhole(t *testing.T) {
	tasks := &seenTasks{}
	s := New(Config{Name: "i-1"}, tasks)
	running := &pborch.Task{Instance: "i-1", DesiredStatus: orchestrator.StatusRunning}
	if got, _ := heldTasks(s); got != nil {
		t.Fatalf("before any listing the agent resumes from %q; want a whole snapshot", got)
	}

	// A listing cut short holds nothing either.
	if err := run(t, s, at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 7, "t1", running), "5")); status.Code(err) != codes.Unavailable {
		t.Fatalf("consume = %v", err)
	}
	if got, _ := heldTasks(s); got != nil {
		t.Fatalf("after a listing cut short the agent resumes from %q; want a whole snapshot", got)
	}

	run(t, s,
		definitionEvent("web-1"),
		at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 7, "t1", running), "5"),
		at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 7, "t2", running), "6"),
		at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 7, "t3", running), "7"),
		end(7, false),
		at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 9, "t4", running), "9"),
		at(taskEvent(pbresource.WatchEvent_OP_DELETE, 10, "t3", running), "7"),
	)
	// Its own report of t2, stored at 11 (not streamed back).
	stored := at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 0, "t2", running), "11").GetResource()
	s.written(Report{Request: &pbresource.WriteStatusRequest{Id: stored.GetId()}}, stored)
	tk, defs := heldTasks(s)
	if want := []string{"t1@5", "t2@11", "t4@9"}; !slices.Equal(tk, want) || !slices.Equal(defs, []string{"web-1"}) {
		t.Fatalf("resumes from %q and %q; want %q and [web-1]", tk, defs, want)
	}
	if got := s.ViewIndex(); got != 11 {
		t.Fatalf("view index %d, want 11", got)
	}

	// Resumed: t1 is gone, t4 changed, t5 is new, and an upsert of t2
	// older than its report is not taken. t2's report is kept.
	observed, _ := tasks.taken()
	stream := chanStream(make(chan *pbresource.WatchEvent))
	done := make(chan error, 1)
	go func() { done <- s.consume(stream) }()
	for _, ev := range []*pbresource.WatchEvent{
		at(taskEvent(pbresource.WatchEvent_OP_DELETE, 12, "t1", running), "5"),
		at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 12, "t2", running), "10"),
		at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 12, "t4", running), "12"),
		at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 12, "t5", running), "8"),
	} {
		stream <- ev
	}
	if n, listings := tasks.taken(); n != observed || len(listings) != 1 {
		t.Fatalf("a resumed start was handed over before its end: %d observed, %d listings", n-observed, len(listings)-1)
	}
	stream <- end(12, true)
	close(stream)
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Fatalf("consume = %v", err)
	}
	if got := tasks.lastListing(); !slices.Equal(got, []string{"t2", "t4", "t5"}) {
		t.Fatalf("after the resumed start the task manager got the listing %q; want t2, t4, t5", got)
	}
	if tk, _ := heldTasks(s); !slices.Equal(tk, []string{"t2@11", "t4@12", "t5@8"}) {
		t.Fatalf("then resumes from %q", tk)
	}
}

// A stream that says it resumed when the agent sent nothing to resume
// from is refused, and nothing of it is handed over.
func TestAnUnaskedResumeIsRefused(t *testing.T) {
	tasks := &seenTasks{}
	s := New(Config{Name: "i-1"}, tasks)
	err := run(t, s, at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 3, "t1", &pborch.Task{Instance: "i-1"}), "3"), end(3, true))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("consume = %v; want Unavailable (the agent moves to another server)", err)
	}
	if observed, listings := tasks.taken(); observed != 0 || len(listings) != 0 {
		t.Fatalf("handed over %d tasks and %d listings", observed, len(listings))
	}
}

// A whole listing replaces what is held, whatever it was: an older
// server's stream (no resumed mark) is a full snapshot.
func TestAWholeListingReplacesWhatIsHeld(t *testing.T) {
	tasks := &seenTasks{}
	s := New(Config{Name: "i-1"}, tasks)
	tk := &pborch.Task{Instance: "i-1"}
	run(t, s, at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 3, "t1", tk), "3"), end(3, false))
	run(t, s, at(taskEvent(pbresource.WatchEvent_OP_UPSERT, 4, "t2", tk), "4"), end(4, false))
	if got, _ := heldTasks(s); !slices.Equal(got, []string{"t2@4"}) {
		t.Fatalf("holds %q after the second listing; want t2 only", got)
	}
	if got := tasks.lastListing(); !slices.Equal(got, []string{"t2"}) {
		t.Fatalf("the task manager got %q", got)
	}
	// The servers lost their state: nothing held is vouched for.
	s.held.forget()
	if got, _ := heldTasks(s); got != nil {
		t.Fatalf("after the servers lost their state the agent resumes from %q", got)
	}
}

// An agent holding more tasks than a resume may name takes a whole
// snapshot; of definitions it names as many as it may.
func TestResumeBounds(t *testing.T) {
	h := newHeld()
	var listing []*pbresource.Resource
	for i := range orchestrator.MaxHeldEntries + 1 {
		listing = append(listing, &pbresource.Resource{Id: &pbresource.ID{Name: fmt.Sprint("t", i), Uid: fmt.Sprint("u", i)}})
		h.learnDefinition(&pbresource.Resource{Id: &pbresource.ID{Name: fmt.Sprint("d-", i)}})
	}
	h.replace(listing[:1])
	if r := h.resume(); len(r.GetTasks()) != 1 || len(r.GetDefinitions()) != orchestrator.MaxHeldEntries {
		t.Fatalf("resume of 1 task names %d tasks and %d definitions; want 1 and %d", len(r.GetTasks()), len(r.GetDefinitions()), orchestrator.MaxHeldEntries)
	}
	h.replace(listing)
	if r := h.resume(); r != nil {
		t.Fatalf("holding %d tasks the agent resumes (%d named); want a whole snapshot", len(listing), len(r.GetTasks()))
	}
}
