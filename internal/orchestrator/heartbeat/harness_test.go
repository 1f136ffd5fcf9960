package heartbeat_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// fakeClock is the tests' time: it moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// leadership is driven by the test.
type leadership chan bool

func (l leadership) LeaderCh() <-chan bool { return l }

const testTTL = 10 * time.Second

// env is a Tracker over the real resource service on the in-memory
// backend, with a fake clock and a leadership the test drives.
type env struct {
	t       *testing.T
	api     *resource.Service
	clock   *fakeClock
	lead    leadership
	tracker *heartbeat.Tracker
	// metrics holds the tracker's metrics.
	metrics *prometheus.Registry
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvFailover(t, testTTL)
}

// newEnvFailover is newEnv with a tracker whose failover TTL is failover.
func newEnvFailover(t *testing.T, failover time.Duration) *env {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	orchestrator.Register(reg)
	e := &env{
		t:       t,
		api:     resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg}),
		clock:   &fakeClock{now: t0},
		lead:    make(leadership, 1),
		metrics: prometheus.NewRegistry(),
	}
	var err error
	e.tracker, err = heartbeat.NewTracker(heartbeat.Config{TTL: testTTL, FailoverTTL: failover, Instances: e.api, Leadership: e.lead, Clock: e.clock, Registerer: e.metrics})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.tracker.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

// setLeader hands the tracker a leadership change and waits until it has
// acted on it.
func (e *env) setLeader(v bool) {
	e.t.Helper()
	e.lead <- v
	waitFor(e.t, "the tracker to follow leadership", func() bool { return e.tracker.Active() == v })
}

// register stores the Instance as an agent would and returns its version.
func (e *env) register(name, session, status string) string {
	e.t.Helper()
	data, err := anypb.New(&pborch.Instance{Status: status, Drain: status == orchestrator.InstanceDraining})
	if err != nil {
		e.t.Fatal(err)
	}
	reg, err := anypb.New(&pborch.AgentRegistration{Session: session, RegisteredAt: timestamppb.Now()})
	if err != nil {
		e.t.Fatal(err)
	}
	res := &pbresource.Resource{Id: orchestrator.InstanceID(name), Data: data}
	if cur, err := e.api.Read(context.Background(), &pbresource.ReadRequest{Id: res.Id}); err == nil {
		res.Version = cur.GetResource().GetVersion()
	}
	// One commit, as AgentService.Register writes it: the data and the
	// registration in status["agent"].
	out, err := e.api.WriteBatch(resource.AsAgent(context.Background(), name), &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{res},
		Statuses: []*pbresource.WriteStatusRequest{{Id: res.Id, Key: orchestrator.AgentStatusKey,
			Status: &pbresource.Status{Data: reg}}},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out.GetStatuses()[0].GetVersion()
}

// waitFor polls cond until it holds, failing the test after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// metric returns the value of a counter (the sample count of a histogram)
// of the tracker's, by name and label value ("" for none).
func (e *env) metric(name, label string) float64 {
	e.t.Helper()
	families, err := e.metrics.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
