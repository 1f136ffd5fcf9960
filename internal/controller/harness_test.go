package controller_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// The test types, on the real resource service over the in-memory backend:
// a Deployment owns Tasks; a Task names (in its data) the Instance it is
// placed on.
var (
	deploymentType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Deployment"}
	taskType       = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Task"}
	instanceType   = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Instance"}
)

// harness is a resource service over an in-memory backend, and a Manager
// following a leadership channel the test drives. Build it inside a
// synctest bubble.
type harness struct {
	t       *testing.T
	ctx     context.Context
	backend *inmem.Backend
	svc     *resource.Service
	reg     *resource.Registry
	leader  chan bool
	mgr     *controller.Manager
	metrics *prometheus.Registry
	logs    *logBuffer
}

// logBuffer collects the Manager's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// leadership is the hand-made Leadership boundary: the test says when this
// server leads.
type leadership chan bool

func (l leadership) LeaderCh() <-chan bool { return l }

func newHarness(t *testing.T, opts ...inmem.Option) *harness {
	t.Helper()
	h := &harness{
		t:       t,
		ctx:     t.Context(),
		backend: inmem.NewBackend(opts...),
		reg:     resource.NewRegistry(),
		leader:  make(chan bool),
		metrics: prometheus.NewRegistry(),
		logs:    &logBuffer{},
	}
	h.reg.Register(resource.Registration{Type: deploymentType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
	h.reg.Register(resource.Registration{Type: taskType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
	h.reg.Register(resource.Registration{Type: instanceType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeCluster})
	h.svc = resource.NewService(resource.Config{Backend: h.backend, Registry: h.reg})
	mgr, err := controller.NewManager(controller.Config{
		Client:     h.svc,
		Leadership: leadership(h.leader),
		Registerer: h.metrics,
		Logger:     slog.New(slog.NewTextHandler(h.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.mgr = mgr
	return h
}

// start runs the Manager until the test ends.
func (h *harness) start() {
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error)
	go func() { done <- h.mgr.Start(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("Start returned %v", err)
		}
	})
}

// setLeader tells the Manager it leads, or no longer does, and waits until
// everything has settled.
func (h *harness) setLeader(leader bool) {
	h.leader <- leader
	synctest.Wait()
}

func (h *harness) register(c controller.Controller) {
	h.t.Helper()
	if err := h.mgr.Register(c); err != nil {
		h.t.Fatal(err)
	}
}

func id(typ *pbresource.Type, name string) *pbresource.ID {
	ns := "default"
	if typ == instanceType {
		ns = ""
	}
	return &pbresource.ID{Type: typ, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: name}
}

// write stores a resource whose data is value, with an owner when given.
func (h *harness) write(typ *pbresource.Type, name, value string, owner *pbresource.ID) *pbresource.Resource {
	h.t.Helper()
	data, err := anypb.New(wrapperspb.String(value))
	if err != nil {
		h.t.Fatal(err)
	}
	resp, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id(typ, name), Owner: owner, Data: data}})
	if err != nil {
		h.t.Fatalf("write %s: %v", name, err)
	}
	return resp.GetResource()
}

// writeBatch stores resources of one type, with empty data, in one batch.
func (h *harness) writeBatch(typ *pbresource.Type, names ...string) {
	h.t.Helper()
	data, err := anypb.New(wrapperspb.String(""))
	if err != nil {
		h.t.Fatal(err)
	}
	var batch []*pbresource.Resource
	for _, n := range names {
		batch = append(batch, &pbresource.Resource{Id: id(typ, n), Data: data})
	}
	if _, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: batch}); err != nil {
		h.t.Fatalf("write batch %v: %v", names, err)
	}
}

func (h *harness) delete(typ *pbresource.Type, name string) {
	h.t.Helper()
	if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: id(typ, name)}); err != nil {
		h.t.Fatalf("delete %s: %v", name, err)
	}
}

// recorder is a Reconciler that records what it was asked to reconcile and
// what it found: "name" when the resource is stored, "name:gone" when not.
type recorder struct {
	svc *resource.Service
	// block, when set, is called first; it may block (on ctx) to hold a
	// reconcile in flight.
	block func(ctx context.Context, req controller.Request)

	mu  sync.Mutex
	got []string
}

func (r *recorder) Reconcile(ctx context.Context, req controller.Request) error {
	if r.block != nil {
		r.block(ctx, req)
	}
	entry := req.ID.GetName()
	_, err := r.svc.Read(ctx, &pbresource.ReadRequest{Id: req.ID})
	switch {
	case status.Code(err) == codes.NotFound:
		entry += ":gone"
	case err != nil:
		return err
	}
	r.mu.Lock()
	r.got = append(r.got, entry)
	r.mu.Unlock()
	return nil
}

// take returns what was recorded since the last take, sorted, each entry
// once: the queue may or may not merge two changes that reach it close
// together (an incarnation's deletion and its successor's creation), so
// the tests assert what ran, not how often; the queue tests count runs.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.got
	r.got = nil
	slices.Sort(out)
	return slices.Compact(out)
}

func (h *harness) expect(r *recorder, want ...string) {
	h.t.Helper()
	got := r.take()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		h.t.Errorf("reconciled %q, want %q", got, want)
	}
}

// metric returns the sum, over the series that have the given labels, of a
// counter's or gauge's value (a histogram's sample count), or -1 when no
// series has them.
func (h *harness) metric(name string, labels map[string]string) float64 {
	h.t.Helper()
	families, err := h.metrics.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			found = true
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	if !found {
		return -1
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
