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
			state[ev.GetResource().GetId().GetName()] = orchestrator.TaskStatusOf(ev.GetResource()).GetLastStatus()
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
		tk.DesiredStatus, tk.Task.StopReason = orchestrator.StatusStopped, "replaced by a new version of the environment"
		oldData, _ := anypb.New(tk.Task)
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
			if ev.GetResource().GetId().GetName() == "ls-2" && orchestrator.TaskStatusOf(ev.GetResource()).GetLastStatus() == orchestrator.StatusRunning {
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
