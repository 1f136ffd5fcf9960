package tasks

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/tasknet"
)

// steps is what the network, the hooks and the runner did, in order.
type steps struct {
	mu  sync.Mutex
	all []string
}

func (s *steps) add(step string) {
	s.mu.Lock()
	s.all = append(s.all, step)
	s.mu.Unlock()
}

func (s *steps) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.all)
}

// recordedNetwork stands for the task network (CNI plugins need root): it
// hands out one namespace and records its setup and teardown.
type recordedNetwork struct{ steps *steps }

var bridgeAttachment = tasknet.Attachment{Path: "/run/trellis/netns/U", Address: netip.MustParsePrefix("172.26.64.7/20"), Gateway: netip.MustParseAddr("172.26.64.1"),
	Ports: []tasknet.Port{{Name: "http", ContainerPort: 8080, HostPort: 31000, Protocol: "tcp"}}}

func (recordedNetwork) Unavailable() error { return nil }
func (n recordedNetwork) Setup(_ context.Context, req tasknet.Request) (tasknet.Attachment, error) {
	n.steps.add("setup")
	att := bridgeAttachment
	att.TaskUID = req.TaskUID
	return att, nil
}
func (n recordedNetwork) Teardown(context.Context, tasknet.Attachment) error {
	n.steps.add("teardown")
	return nil
}
func (recordedNetwork) Adopt(tasknet.Attachment) error { return nil }
func (recordedNetwork) Sweep(context.Context, map[string]bool) ([]string, error) {
	return nil, nil
}

// bridgeHooks records its hooks and checks, in each, what it is given of
// the task's network and what the manager would report.
type bridgeHooks struct {
	t     *testing.T
	m     *Manager
	steps *steps
}

func (bridgeHooks) Name() string { return "mesh-init" }

func (h bridgeHooks) Prestart(_ context.Context, tk component.Task) error {
	h.steps.add("prestart")
	h.checkNetwork("prestart", tk)
	return nil
}

func (h bridgeHooks) Poststop(_ context.Context, tk component.Task) error {
	h.steps.add("poststop")
	h.checkNetwork("poststop", tk)
	// The runner has reported STOPPED; nothing may say so yet.
	for _, r := range h.m.Reports() {
		var st pborch.TaskStatus
		if r.Request.GetStatus().GetData().UnmarshalTo(&st) == nil && st.GetLastStatus() == orchestrator.StatusStopped {
			h.t.Errorf("poststop: a STOPPED report is pending before the Poststop returned")
		}
	}
	return nil
}

func (h bridgeHooks) checkNetwork(hook string, tk component.Task) {
	n := tk.Network
	if n.Mode != "bridge" || n.NamespacePath != bridgeAttachment.Path || n.Address != bridgeAttachment.Address || n.Gateway != bridgeAttachment.Gateway ||
		len(n.Ports) != 1 || n.Ports[0] != (component.Port{Name: "http", ContainerPort: 8080, HostPort: 31000, Protocol: "tcp"}) {
		h.t.Errorf("%s: network %+v; want the namespace as set up", hook, n)
	}
	if tk.ID.GetUid() != "t1-uid" || tk.ID.GetName() != "t1" {
		h.t.Errorf("%s: task %v", hook, tk.ID)
	}
}

// A bridge task: its namespace is set up before the Prestart, which sees
// it, and torn down after the Poststop, which still sees it; the STOPPED
// report comes after both.
func TestHooksAroundABridgeTask(t *testing.T) {
	s := &steps{}
	runners := make(chan *stepRunner, 1)
	var m *Manager
	h := &bridgeHooks{t: t, steps: s}
	m, err := New(Config{
		Instance: "i-1", DataDir: t.TempDir(), Session: "s1",
		Network: recordedNetwork{s},
		Hooks:   []Hooks{h},
		NewRunner: func(rc RunnerConfig) (TaskRunner, error) {
			s.add("runner in " + rc.Netns)
			r := &stepRunner{rc: rc, stopped: make(chan string, 1)}
			runners <- r
			return r, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	ctx, cancel := context.WithCancel(context.Background())
	defer m.Wait()
	defer cancel()
	m.Resume(ctx)
	def := shDefinition("web", "true")
	def.Network = orchestrator.NetworkBridge
	def.Ports = []*pborch.PortMapping{{Name: "http", ContainerPort: 8080}}
	detach := m.Attach(ctx, func(context.Context, string, string) (*pborch.TaskDefinition, error) { return def, nil })
	defer detach()

	data, _ := anypb.New(&pborch.Task{TaskDefinition: "web:1", Instance: "i-1", DesiredStatus: orchestrator.StatusRunning})
	res := &pbresource.Resource{Id: orchestrator.TaskID("default", "t1"), Version: "5", Generation: 1, Data: data}
	res.Id.Uid = "t1-uid"
	m.ObserveListing([]*pbresource.Resource{res})
	r := <-runners
	rs := waitReports(t, m, 1)
	got, _ := storedAs(t, res, rs[0], 6)
	m.Written(rs[0], got)

	r.Stop("stopped by user")
	rs = waitReports(t, m, 1)
	_, st := storedAs(t, got, rs[0], 7)
	if st.GetLastStatus() != orchestrator.StatusStopped {
		t.Fatalf("report %v; want STOPPED", st)
	}
	want := []string{"setup", "prestart", "runner in " + bridgeAttachment.Path, "poststop", "teardown"}
	if got := s.list(); !slices.Equal(got, want) {
		t.Errorf("steps %q, want %q", got, want)
	}
}
