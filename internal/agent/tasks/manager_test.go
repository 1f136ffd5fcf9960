package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator"
)

// stepRunner is a runner whose task runs until it is asked to stop: it
// reports RUNNING when Run starts and STOPPED with the stop's reason when
// it ends.
type stepRunner struct {
	rc      RunnerConfig
	stopped chan string
	once    sync.Once
}

func (r *stepRunner) Run(ctx context.Context, _ json.RawMessage) error {
	r.rc.Report(Snapshot{Status: orchestrator.StatusRunning, Containers: []ContainerStatus{{Name: "app", Status: orchestrator.StatusRunning}}})
	select {
	case <-ctx.Done():
		return ctx.Err()
	case reason := <-r.stopped:
		r.rc.Report(Snapshot{Status: orchestrator.StatusStopped, StopReason: reason, Containers: []ContainerStatus{{Name: "app", Status: orchestrator.StatusStopped}}})
		return nil
	}
}

func (r *stepRunner) Stop(reason string) { r.once.Do(func() { r.stopped <- reason }) }

func (r *stepRunner) Logs(context.Context, string, driver.Stream, bool) (io.ReadCloser, error) {
	return nil, ErrNotStarted
}

// waitReports waits until Reports has n reports, and returns them.
func waitReports(t *testing.T, m *Manager, n int) []Report {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if rs := m.Reports(); len(rs) == n {
			return rs
		}
		select {
		case <-m.ReportsWaiting():
		case <-deadline:
			t.Fatalf("timed out waiting for %d reports; have %d", n, len(m.Reports()))
		}
	}
}

// storedAs is what a store that took r over prev gives back: prev with
// r's status at version (its generation unchanged: a status write does
// not move it).
func storedAs(t *testing.T, prev *pbresource.Resource, r Report, version int) (*pbresource.Resource, *pborch.TaskStatus) {
	t.Helper()
	if r.Request.GetKey() != orchestrator.TaskStatusKey || r.Request.GetId().GetUid() != prev.GetId().GetUid() {
		t.Fatalf("report %v: want status %q of %s", r.Request, orchestrator.TaskStatusKey, prev.GetId().GetUid())
	}
	res := proto.Clone(prev).(*pbresource.Resource)
	res.Version = strconv.Itoa(version)
	res.Status = map[string]*pbresource.Status{orchestrator.TaskStatusKey: r.Request.GetStatus()}
	return res, orchestrator.TaskStatusOf(res)
}

// The task manager runs a task through what a session hands it, with no
// server: a task placed on its instance is started through the attached
// session's definition reader, its reports come out of Reports, and a
// stop the store asks for reaches the runner and comes back as the
// STOPPED report, after which the task is forgotten.
func TestManagerRunsATaskWithoutAServer(t *testing.T) {
	runners := make(chan *stepRunner, 1)
	m, err := New(Config{
		Instance: "i-1", DataDir: t.TempDir(), Session: "s1",
		NewRunner: func(rc RunnerConfig) (TaskRunner, error) {
			r := &stepRunner{rc: rc, stopped: make(chan string, 1)}
			runners <- r
			return r, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer m.Wait()
	defer cancel()
	m.Resume(ctx)
	var reads atomic.Int32
	detach := m.Attach(ctx, func(_ context.Context, ns, ref string) (*pborch.TaskDefinition, error) {
		reads.Add(1)
		if ns != "default" || ref != "web:1" {
			return nil, errors.New("unknown definition " + ns + "/" + ref)
		}
		return shDefinition("web", "true"), nil
	})
	defer detach()

	placed := &pborch.Task{TaskDefinition: "web:1", Instance: "i-1", DesiredStatus: orchestrator.StatusRunning}
	data, _ := anypb.New(placed)
	res := &pbresource.Resource{Id: orchestrator.TaskID("default", "t1"), Version: "5", Generation: 1, Data: data}
	res.Id.Uid = "t1-uid"
	// Another instance's task is none of this manager's business.
	other := &pbresource.Resource{Id: orchestrator.TaskID("default", "t2"), Version: "5", Generation: 1}
	other.Id.Uid = "t2-uid"
	other.Data, _ = anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: "i-2", DesiredStatus: orchestrator.StatusRunning})
	m.ObserveListing([]*pbresource.Resource{res, other})

	r := <-runners
	if r.rc.UID != "t1-uid" || r.rc.Definition.GetFamily() != "web" || r.rc.Env[EnvInstance] != "i-1" {
		t.Fatalf("runner config %+v", r.rc)
	}
	rs := waitReports(t, m, 1)
	got, st := storedAs(t, res, rs[0], 6)
	if st.GetLastStatus() != orchestrator.StatusRunning || st.GetSession() != "s1" || st.GetReportedAt() == nil || rs[0].Request.GetVersion() != "5" {
		t.Fatalf("report %v at version %s; want RUNNING of session s1, a CAS on version 5", st, rs[0].Request.GetVersion())
	}
	m.Written(rs[0], got)
	if rs := m.Reports(); len(rs) != 0 {
		t.Fatalf("%d reports left once the store took the report", len(rs))
	}

	// The scheduler stops it.
	stop := &pborch.Task{}
	_ = got.GetData().UnmarshalTo(stop)
	stop.DesiredStatus, stop.StopReason = orchestrator.StatusStopped, "stopped by user: done"
	got.Version, got.Generation = "7", 2
	got.Data, _ = anypb.New(stop)
	m.Observe(got, false)
	rs = waitReports(t, m, 1)
	final, st := storedAs(t, got, rs[0], 8)
	if st.GetLastStatus() != orchestrator.StatusStopped || st.GetStopReason() != "stopped by user: done" {
		t.Fatalf("report %v; want STOPPED with the stopper's reason", st)
	}
	m.Written(rs[0], final)
	for {
		if ts := m.Tasks(); len(ts) == 0 {
			break
		}
		select {
		case <-time.After(30 * time.Second):
			t.Fatalf("the task is still known once its STOPPED report is stored: %+v", m.Tasks())
		case <-m.changedCh():
		}
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d definition reads, want 1", n)
	}
}

func (m *Manager) changedCh() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}
