package assignments

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
)

// fataler is what the stream helpers need of a test: a *testing.T, or a
// *rapid.T in a property.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// stream runs WatchTasks for req until cancel (or the test's end).
func (h *harness) stream(req *pbagent.WatchTasksRequest) (s *eventStream, cancel func()) {
	h.t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	s = &eventStream{ctx: ctx, events: make(chan *pbresource.WatchEvent, 256)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.hub.WatchTasks(req, s)
	}()
	cancel = func() { stop(); <-done }
	h.t.Cleanup(cancel)
	return s, cancel
}

// recv is the stream's next event.
func (s *eventStream) recv(t fataler) *pbresource.WatchEvent {
	t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event from the task stream")
		return nil
	}
}

// eventName names an event: "end", "end resumed", "def NAME", "upsert
// NAME", "delete NAME".
func eventName(ev *pbresource.WatchEvent) string {
	switch {
	case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT && ev.GetResumed():
		return "end resumed"
	case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
		return "end"
	case ids.SameType(ev.GetResource().GetId().GetType(), orchestrator.TaskDefinitionType):
		return "def " + ev.GetResource().GetId().GetName()
	case ev.GetOp() == pbresource.WatchEvent_OP_DELETE:
		return "delete " + ev.GetResource().GetId().GetName()
	default:
		return "upsert " + ev.GetResource().GetId().GetName()
	}
}

// agentView is what a test agent holds of its tasks: what a real agent
// (internal/agent/session) keeps, reduced to uids and versions.
type agentView struct {
	tasks map[string]*pbresource.Resource // by uid
	defs  map[string]bool                 // definition names
	index uint64
	whole bool
}

func newAgentView() *agentView {
	return &agentView{tasks: map[string]*pbresource.Resource{}, defs: map[string]bool{}}
}

// take applies one event; start collects a stream's start until its
// END_OF_SNAPSHOT, which replaces the view (whole) or applies to it
// (resumed).
func (v *agentView) take(t fataler, ev *pbresource.WatchEvent, start *[]*pbresource.WatchEvent, inStart bool) {
	t.Helper()
	if ids.SameType(ev.GetResource().GetId().GetType(), orchestrator.TaskDefinitionType) {
		v.defs[ev.GetResource().GetId().GetName()] = true
		return
	}
	v.index = max(v.index, ev.GetIndex())
	switch {
	case ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
		if !ev.GetResumed() {
			v.tasks = map[string]*pbresource.Resource{}
		}
		for _, e := range *start {
			v.apply(e)
		}
		*start, v.whole = nil, true
	case inStart:
		*start = append(*start, ev)
	default:
		v.apply(ev)
	}
}

func (v *agentView) apply(ev *pbresource.WatchEvent) {
	if ev.GetOp() == pbresource.WatchEvent_OP_DELETE {
		delete(v.tasks, ev.GetResource().GetId().GetUid())
		return
	}
	v.tasks[ev.GetResource().GetId().GetUid()] = ev.GetResource()
}

// request is the WatchTasksRequest the agent resumes with.
func (v *agentView) request(instance string) *pbagent.WatchTasksRequest {
	req := &pbagent.WatchTasksRequest{Instance: instance, WithDefinitions: true, MinIndex: v.index}
	if !v.whole {
		return req
	}
	req.Resume = &pbagent.WatchTasksResume{}
	for _, res := range v.tasks {
		req.Resume.Tasks = append(req.Resume.Tasks, &pbagent.HeldResource{Id: res.GetId(), Version: res.GetVersion()})
	}
	for name := range v.defs {
		req.Resume.Definitions = append(req.Resume.Definitions, &pbresource.ID{Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name})
	}
	return req
}

// versions is the view as "name/uid@version", sorted.
func versions(tasks map[string]*pbresource.Resource) []string {
	var out []string
	for _, r := range tasks {
		out = append(out, fmt.Sprintf("%s/%s@%s", r.GetId().GetName(), r.GetId().GetUid(), r.GetVersion()))
	}
	slices.Sort(out)
	return out
}

// readStart reads a stream up to and including its END_OF_SNAPSHOT into
// v, and returns the names of what it read.
func (v *agentView) readStart(t fataler, s *eventStream) []string {
	t.Helper()
	var start []*pbresource.WatchEvent
	var names []string
	for {
		ev := s.recv(t)
		names = append(names, eventName(ev))
		v.take(t, ev, &start, true)
		if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			return names
		}
	}
}

func (h *harness) relabel(name, value string) {
	h.t.Helper()
	resp, err := h.api.Read(context.Background(), &pbresource.ReadRequest{Id: orchestrator.TaskID("default", name)})
	if err != nil {
		h.t.Fatal(err)
	}
	res := resp.GetResource()
	res.Metadata = map[string]string{"n": value}
	out, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: res})
	if err != nil {
		h.t.Fatal(err)
	}
	h.caughtUp(out.GetResource().GetVersion())
}

// A resumed stream sends exactly what differs from what the agent holds:
// the task that changed, the one placed meanwhile, the delete of the one
// deleted, the delete and the upsert of one deleted and created again
// under the same name; not the task it holds as stored, and no task
// definition it holds (a new one, ahead of its first task). Its
// END_OF_SNAPSHOT says it resumed; the agent then holds what a fresh
// snapshot shows. The streams and what resuming saved are counted.
func TestResumedStreamSendsTheDifference(t *testing.T) {
	h := newHarness(t)
	h.registerDefinition("web", 1)
	h.registerDefinition("web", 2)
	for _, name := range []string{"same", "changed", "gone", "again"} {
		h.placeOf(name, "i-1", "web:1")
	}
	h.placeOf("elsewhere", "i-2", "web:1")

	agent := newAgentView()
	first, cut := h.stream(agent.request("i-1"))
	if got := agent.readStart(t, first); len(got) != 6 || got[0] != "def web-1" || got[5] != "end" {
		t.Fatalf("first stream: %q; want web-1, the four tasks (in no particular order), end", got)
	}
	cut() // the stream is lost; the store moves on

	h.relabel("changed", "2")
	h.remove("gone")
	h.remove("again")
	h.placeOf("again", "i-1", "web:1")
	h.placeOf("new", "i-1", "web:2")
	h.placeOf("new1", "i-1", "web:1")
	h.placeOf("elsewhere2", "i-2", "web:2")

	req := agent.request("i-1")
	resumed, _ := h.stream(req)
	got := agent.readStart(t, resumed)
	want := []string{"delete again", "delete gone", "upsert again", "upsert changed", "def web-2", "upsert new", "upsert new1", "end resumed"}
	if !slices.Equal(got, want) {
		t.Fatalf("resumed stream:\n got %q\nwant %q", got, want)
	}

	fresh := newAgentView()
	fs, _ := h.stream(fresh.request("i-1"))
	fresh.readStart(t, fs)
	if a, f := versions(agent.tasks), versions(fresh.tasks); !slices.Equal(a, f) {
		t.Fatalf("after resuming the agent holds\n%q\na fresh snapshot shows\n%q", a, f)
	}

	// Two whole starts (the first stream, the fresh one), one resumed; it
	// left out "same" and web-1.
	m := h.hub.metrics
	if full, res := testutil.ToFloat64(m.streams.WithLabelValues(startFull)), testutil.ToFloat64(m.streams.WithLabelValues(startResumed)); full != 2 || res != 1 {
		t.Errorf("streams started: %v full, %v resumed; want 2 and 1", full, res)
	}
	if got := testutil.ToFloat64(m.startEvents.WithLabelValues(startResumed)); got != float64(len(want)-1) {
		t.Errorf("resumed start events %v, want %d", got, len(want)-1)
	}
	if got := testutil.ToFloat64(m.saved); got != 2 {
		t.Errorf("events saved %v, want 2 (the task held as stored, and web-1)", got)
	}

	// Changes after the start come as before, with no definition the agent
	// said it holds.
	h.placeOf("later", "i-1", "web:2")
	if ev := resumed.recv(t); eventName(ev) != "upsert later" {
		t.Fatalf("after the start: %s, want the upsert of later (web-2 held)", eventName(ev))
	}
}

// A request without resume (an older agent, or one that holds no whole
// view) gets a whole snapshot, whose END_OF_SNAPSHOT does not say resumed;
// one that resumes from nothing gets every task too, but marked resumed.
func TestWholeAndEmptyResume(t *testing.T) {
	h := newHarness(t)
	h.place("a", "i-1")
	h.place("b", "i-1")
	whole, _ := h.stream(&pbagent.WatchTasksRequest{Instance: "i-1"})
	var names []string
	for range 3 {
		names = append(names, eventName(whole.recv(t)))
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"end", "upsert a", "upsert b"}) {
		t.Fatalf("whole snapshot: %q", names)
	}
	empty, _ := h.stream(&pbagent.WatchTasksRequest{Instance: "i-1", Resume: &pbagent.WatchTasksResume{}})
	names = nil
	for range 3 {
		names = append(names, eventName(empty.recv(t)))
	}
	if !slices.Equal(names, []string{"upsert a", "upsert b", "end resumed"}) {
		t.Fatalf("resumed from nothing: %q", names)
	}
}

// A resume the server cannot use is refused naming the entry at fault,
// before any subscription.
func TestResumeRefusesBadInput(t *testing.T) {
	h := newHarness(t)
	held := func(name, uid string) *pbagent.HeldResource {
		return &pbagent.HeldResource{Id: &pbresource.ID{Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name, Uid: uid}, Version: "3"}
	}
	many := make([]*pbagent.HeldResource, orchestrator.MaxHeldEntries+1)
	for i := range many {
		many[i] = held(fmt.Sprintf("t%d", i), fmt.Sprintf("u%d", i))
	}
	manyDefs := make([]*pbresource.ID, orchestrator.MaxHeldEntries+1)
	for i := range manyDefs {
		manyDefs[i] = &pbresource.ID{Name: fmt.Sprintf("web-%d", i+1)}
	}
	for _, tc := range []struct {
		name   string
		resume *pbagent.WatchTasksResume
		field  string
	}{
		{"no uid", &pbagent.WatchTasksResume{Tasks: []*pbagent.HeldResource{held("a", "u1"), held("b", "")}}, "resume.tasks[1].id.uid"},
		{"no name", &pbagent.WatchTasksResume{Tasks: []*pbagent.HeldResource{held("", "u1")}}, "resume.tasks[0].id.name"},
		{"no definition name", &pbagent.WatchTasksResume{Definitions: []*pbresource.ID{{}}}, "resume.definitions[0].name"},
		{"too many tasks", &pbagent.WatchTasksResume{Tasks: many}, "resume.tasks"},
		{"too many definitions", &pbagent.WatchTasksResume{Definitions: manyDefs}, "resume.definitions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &eventStream{ctx: context.Background(), events: make(chan *pbresource.WatchEvent, 1)}
			err := h.hub.WatchTasks(&pbagent.WatchTasksRequest{Instance: "i-1", Resume: tc.resume}, s)
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
				t.Fatalf("WatchTasks = %v; want InvalidArgument naming %s", err, tc.field)
			}
			if len(s.events) != 0 {
				t.Fatalf("a refused stream sent %s", eventName(<-s.events))
			}
		})
	}
}

// write writes res and waits until the hub has it.
func (h *harness) write(res *pbresource.Resource) {
	h.t.Helper()
	out, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: res})
	if err != nil {
		h.t.Fatal(err)
	}
	h.caughtUp(out.GetResource().GetVersion())
}
