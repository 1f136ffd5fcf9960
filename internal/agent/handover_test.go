package agent

import (
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

// taskLog records every version of every task the store keeps, in index
// order, from a watch.
type taskLog struct {
	mu     sync.Mutex
	events []*pbresource.WatchEvent
	err    error
}

func watchTasks(t *testing.T, srv *testServer) *taskLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := srv.res.WatchList(ctx, &pbresource.WatchListRequest{Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	l := &taskLog{}
	synced := make(chan struct{})
	go func() {
		for {
			ev, err := stream.Recv()
			if err != nil {
				if status.Code(err) != codes.Canceled {
					l.mu.Lock()
					l.err = err
					l.mu.Unlock()
				}
				return
			}
			if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
				close(synced)
				continue
			}
			l.mu.Lock()
			l.events = append(l.events, ev)
			l.mu.Unlock()
		}
	}()
	select {
	case <-synced:
	case <-waitTimeout():
		t.Fatal("the task watch sent no snapshot")
	}
	return l
}

// maxRunning replays the log and returns the most tasks that were RUNNING
// at once on instance, after each index.
func (l *taskLog) maxRunning(t *testing.T, instance string) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		t.Fatalf("the task watch failed: %v", l.err)
	}
	state := map[string]string{}
	most := 0
	for i, ev := range l.events {
		var tk pborch.Task
		if err := ev.GetResource().GetData().UnmarshalTo(&tk); err != nil {
			t.Fatal(err)
		}
		if tk.GetInstance() == instance {
			state[ev.GetResource().GetId().GetName()] = tk.GetLastStatus()
		}
		if i+1 < len(l.events) && l.events[i+1].GetIndex() == ev.GetIndex() {
			continue // the rest of this index's changes first
		}
		n := 0
		for _, st := range state {
			if st == orchestrator.StatusRunning {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// The scheduler stops a task and places its replacement in one write: the
// agent starts the replacement once the old task has stopped, and the
// store never shows the two running.
func TestReplacementStartsOnceTheOldTaskStopped(t *testing.T) {
	srv := startServer(t)
	a := startAgent(t, config(t, "i-1", newProcTable(t), srv))
	registered(t, srv, a)
	// The old task takes a while to stop: its shell traps SIGTERM.
	srv.registerDefinition(t, "default", shDefinition("slow", "trap 'sleep 0.3; exit 0' TERM; while :; do sleep 0.05; done"))
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.write(t, orchestrator.TaskID("default", "ls-1"), &pborch.Task{TaskDefinition: "slow:1", Instance: "i-1", StartedBy: "test", Environment: "ls"})
	srv.waitTask(t, "default", "ls-1", "runs", lastStatus(orchestrator.StatusRunning))
	log := watchTasks(t, srv)

	for {
		old, tk := srv.task(t, "default", "ls-1")
		tk.DesiredStatus, tk.StopReason = orchestrator.StatusStopped, "replaced by a new version of the environment"
		oldData, _ := anypb.New(tk)
		newData, _ := anypb.New(&pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", StartedBy: "test", Environment: "ls", Replaces: "ls-1"})
		_, err := srv.res.WriteBatch(context.Background(), &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{
			{Id: old.GetId(), Version: old.GetVersion(), Data: oldData},
			{Id: orchestrator.TaskID("default", "ls-2"), Data: newData},
		}})
		if status.Code(err) == codes.Aborted {
			continue // a report came in between
		}
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	next := srv.waitTask(t, "default", "ls-2", "runs", lastStatus(orchestrator.StatusRunning))
	_, old := srv.task(t, "default", "ls-1")
	if old.GetLastStatus() != orchestrator.StatusStopped {
		t.Fatalf("the replacement runs while the old task is %s", old.GetLastStatus())
	}
	if next.GetStartedAt().AsTime().Before(old.GetStoppedAt().AsTime()) {
		t.Errorf("the replacement started at %v, before the old task stopped at %v", next.GetStartedAt().AsTime(), old.GetStoppedAt().AsTime())
	}
	eventually(t, "the watch has the replacement running", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for _, ev := range log.events {
			if ev.GetResource().GetId().GetName() == "ls-2" && strings.Contains(string(ev.GetResource().GetData().GetValue()), orchestrator.StatusRunning) {
				return true
			}
		}
		return false
	})
	if n := log.maxRunning(t, "i-1"); n != 1 {
		t.Errorf("the store showed %d tasks of the environment running at once, want 1", n)
	}
}

// A task of the environment that is meant to go on running is not
// replaced by one that does not name it: the agent refuses the second
// copy instead of waiting.
func TestUnnamedSecondCopyIsStillRefused(t *testing.T) {
	srv := startServer(t)
	a := startAgent(t, config(t, "i-1", newProcTable(t), srv))
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.write(t, orchestrator.TaskID("default", "ls-1"), &pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", StartedBy: "test", Environment: "ls"})
	srv.waitTask(t, "default", "ls-1", "runs", lastStatus(orchestrator.StatusRunning))
	srv.write(t, orchestrator.TaskID("default", "ls-2"), &pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", StartedBy: "test", Environment: "ls", Replaces: "ls-0"})
	tk := srv.waitTask(t, "default", "ls-2", "is refused", lastStatus(orchestrator.StatusStopped))
	if !strings.Contains(tk.GetStopReason(), "task ls-1 of environment ls already runs on this instance") {
		t.Errorf("stop reason %q", tk.GetStopReason())
	}
}

// The reporter never writes a replacement's report before the STOPPED
// report of the task it replaced: both go in one batch, the STOPPED one
// first, and while the old one's report cannot be written (the store has
// not shown it yet) the new one's waits.
func TestReportsOfAHandoverGoTogether(t *testing.T) {
	a := unstartedAgent(t)
	task := func(name, env, last string) *task {
		e := a.addTaskLocked("default", name, name+"-uid")
		e.stored = &pborch.Task{Instance: "i-1", Environment: env, DesiredStatus: orchestrator.StatusRunning, LastStatus: orchestrator.StatusPending}
		data, _ := anypb.New(e.stored)
		e.res = &pbresource.Resource{Id: orchestrator.TaskID("default", name), Data: data}
		e.seen = true
		e.changed(Snapshot{Status: last})
		if last == orchestrator.StatusStopped {
			e.phase = phaseDone
		} else {
			e.phase = phaseRunning
		}
		return e
	}
	names := func(rs []pendingReport) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.t.name)
		}
		return strings.Join(out, ",")
	}
	a.mu.Lock()
	task("web-2", "web", orchestrator.StatusRunning)
	old := task("web-1", "web", orchestrator.StatusStopped)
	a.mu.Unlock()
	for range 10 { // map order varies
		if got := names(a.collectReports()); got != "web-1,web-2" {
			t.Fatalf("batch %s, want the STOPPED report of web-1 first", got)
		}
	}
	a.mu.Lock()
	old.seen = false // resumed from local state: the store has not shown it
	a.mu.Unlock()
	if got := names(a.collectReports()); got != "" {
		t.Fatalf("batch %s, want web-2 held back until web-1's report can be written", got)
	}
	a.mu.Lock()
	old.seen, old.written = true, old.seq // web-1's report is stored
	task("db-1", "db", orchestrator.StatusRunning)
	a.mu.Unlock()
	if got := names(a.collectReports()); got != "db-1,web-2" && got != "web-2,db-1" {
		t.Fatalf("batch %s, want web-2 and db-1", got)
	}
}

// unstartedAgent is an agent of instance i-1 that is never started: its
// decisions are driven by hand.
func unstartedAgent(t *testing.T) *Agent {
	t.Helper()
	cfg := config(t, "i-1", newProcTable(t))
	cfg.Servers = []string{"127.0.0.1:1"} // never dialled
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
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

// A fresh listing is acted on only once it is whole: an agent that lost
// its local state must not start (and report) a replacement before it has
// heard of the task it replaces, which the listing may bring later.
func TestAListingIsActedOnOnlyWhole(t *testing.T) {
	a := unstartedAgent(t)
	upsert := func(name string, tk *pborch.Task) *pbresource.WatchEvent {
		data, _ := anypb.New(tk)
		return &pbresource.WatchEvent{Op: pbresource.WatchEvent_OP_UPSERT, Index: 7,
			Resource: &pbresource.Resource{Id: &pbresource.ID{Name: name, Uid: name + "-uid", Type: orchestrator.TaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}}, Generation: 1, Data: data}}
	}
	// The replacement comes first, the task it replaces (lost with the
	// instance while the agent was away) after it; the listing is cut
	// before its end.
	stream := &scriptedStream{read: make(chan struct{}), release: make(chan struct{}), events: []*pbresource.WatchEvent{
		upsert("ls-2", &pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", Environment: "ls", Replaces: "ls-1",
			DesiredStatus: orchestrator.StatusRunning, LastStatus: orchestrator.StatusPending}),
		upsert("ls-1", &pborch.Task{TaskDefinition: "sleeper:1", Instance: "i-1", Environment: "ls",
			DesiredStatus: orchestrator.StatusStopped, LastStatus: orchestrator.StatusLost}),
	}}
	s := &session{a: a}
	done := make(chan error, 1)
	go func() { done <- s.consume(context.Background(), stream) }()
	<-stream.read
	a.mu.Lock()
	taken := len(a.tasks)
	a.mu.Unlock()
	close(stream.release)
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Fatalf("consume ended with %v, want the cut stream's error", err)
	}
	if taken != 0 {
		t.Fatalf("%d tasks were taken in before the listing ended, want none", taken)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.tasks) != 0 {
		t.Fatalf("a cut listing left %d tasks taken in, want none (it is listed again)", len(a.tasks))
	}
}
