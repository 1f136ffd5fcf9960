package resource_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

// The test types: Widget (namespaced, with Mutate and Validate hooks, and
// a status key "progress", owned by the controller progressController, that takes an Int64Value, never negative), Gizmo (namespaced, no hooks), Gadget (cluster-scoped), and core's
// Namespace.
var (
	widgetType = &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Widget"}
	gizmoType  = &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Gizmo"}
	gadgetType = &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Gadget"}
	// jobType is namespaced; its data names the instance it is on, whose
	// agent owns its status key "runner" (an Int64Value).
	jobType = &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Job"}
)

func jobInstance(res *pbresource.Resource) (string, error) {
	v, err := resource.DecodeData[*wrapperspb.StringValue](res)
	if err != nil {
		return "", err
	}
	return v.GetValue(), nil
}

// progressController owns Widget's status key "progress"; the harness's
// context (harness.ctx) is its.
const progressController = "progress-reporter"

func registerTestTypes(r *resource.Registry) {
	core.Register(r)
	r.Register(resource.Registration{
		Type:  widgetType,
		Proto: &wrapperspb.StringValue{},
		Scope: resource.ScopeNamespace,
		Mutate: func(res *pbresource.Resource) error {
			v, err := resource.DecodeData[*wrapperspb.StringValue](res)
			if err != nil {
				return err
			}
			if v.GetValue() != "" {
				return nil
			}
			v.Value = "unnamed"
			return res.Data.MarshalFrom(v)
		},
		Validate: func(res *pbresource.Resource) error {
			v, err := resource.DecodeData[*wrapperspb.StringValue](res)
			if err != nil {
				return err
			}
			if v.GetValue() == "invalid" {
				return resource.NewFieldError("data.value", "must not be %q", v.GetValue())
			}
			return nil
		},
		Statuses: map[string]resource.StatusPayload{
			"progress": {Owner: resource.StatusOwner{Controller: progressController}, Proto: &wrapperspb.Int64Value{}, Validate: func(m proto.Message) error {
				if v := m.(*wrapperspb.Int64Value).GetValue(); v < 0 {
					return resource.NewFieldError("value", "must not be negative (got %d)", v)
				}
				return nil
			}},
		},
	})
	r.Register(resource.Registration{Type: gizmoType, Proto: &wrapperspb.BoolValue{}, Scope: resource.ScopeNamespace})
	r.Register(resource.Registration{Type: jobType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace,
		Statuses: map[string]resource.StatusPayload{
			"runner": {Owner: resource.StatusOwner{AgentOf: jobInstance}, Proto: &wrapperspb.Int64Value{}},
		}})
	r.Register(resource.Registration{Type: gadgetType, Proto: &wrapperspb.Int64Value{}, Scope: resource.ScopeCluster})
}

type harness struct {
	t       testing.TB
	backend *inmem.Backend
	store   storage.Backend // what the service uses: backend, or a wrapper of it
	svc     *resource.Service
	ctx     context.Context
	clock   time.Time // what the service's Now returns
}

type harnessOption func(*resource.Config, *harness)

// withAuthorize sets the service's Authorize func.
func withAuthorize(f func(context.Context) (acl.Authorizer, error)) harnessOption {
	return func(c *resource.Config, _ *harness) { c.Authorize = f }
}

// withBackend wraps the in-memory backend before the service gets it.
func withBackend(wrap func(*inmem.Backend) storage.Backend) harnessOption {
	return func(c *resource.Config, h *harness) { c.Backend = wrap(h.backend); h.store = c.Backend }
}

func newHarness(t testing.TB, opts ...harnessOption) *harness {
	return newHarnessWith(t, inmem.NewBackend(), opts...)
}

func newHarnessWith(t testing.TB, b *inmem.Backend, opts ...harnessOption) *harness {
	h := &harness{t: t, backend: b, store: b, ctx: resource.AsController(context.Background(), progressController)}
	reg := resource.NewRegistry()
	registerTestTypes(reg)
	h.clock = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cfg := resource.Config{Backend: b, Registry: reg, Now: func() time.Time { return h.clock }}
	for _, o := range opts {
		o(&cfg, h)
	}
	h.svc = resource.NewService(cfg)
	return h
}

func anyOf(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func widgetID(ns, name string) *pbresource.ID {
	return &pbresource.ID{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: name}
}

func widget(t testing.TB, ns, name, value string) *pbresource.Resource {
	return &pbresource.Resource{Id: widgetID(ns, name), Data: anyOf(t, wrapperspb.String(value))}
}

func gizmo(t testing.TB, ns, name string) *pbresource.Resource {
	return &pbresource.Resource{Id: &pbresource.ID{Type: gizmoType, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: name}, Data: anyOf(t, wrapperspb.Bool(true))}
}

func gadget(t testing.TB, name string, v int64) *pbresource.Resource {
	return &pbresource.Resource{Id: &pbresource.ID{Type: gadgetType, Name: name}, Data: anyOf(t, wrapperspb.Int64(v))}
}

func (h *harness) write(res *pbresource.Resource) *pbresource.Resource {
	h.t.Helper()
	out, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: res})
	if err != nil {
		h.t.Fatalf("write %v: %v", res.GetId(), err)
	}
	return out.GetResource()
}

func (h *harness) createNamespace(name string) *pbresource.Resource {
	h.t.Helper()
	res, err := core.NewNamespace(name, "")
	if err != nil {
		h.t.Fatal(err)
	}
	return h.write(res)
}

// stored returns what the backend holds under id, or nil.
func (h *harness) stored(id *pbresource.ID) *pbresource.Resource {
	h.t.Helper()
	return storedIn(h.t, h.backend, id)
}

func storedIn(t testing.TB, b *inmem.Backend, id *pbresource.ID) *pbresource.Resource {
	res, err := b.Read(context.Background(), storage.StrongConsistency, &pbresource.ID{Type: id.GetType(), Tenancy: id.GetTenancy(), Name: id.GetName()})
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// state is the whole store: its index and every resource, encoded.
type state struct {
	index     uint64
	resources []string
}

func (h *harness) state() state {
	h.t.Helper()
	var s state
	idx, err := h.backend.Store().ForEach(func(r *pbresource.Resource) error {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		s.resources = append(s.resources, string(b))
		return err
	})
	if err != nil {
		h.t.Fatal(err)
	}
	s.index = idx
	return s
}

// requireUnchanged fails unless the store is exactly as before.
func (h *harness) requireUnchanged(before state) {
	h.t.Helper()
	after := h.state()
	if after.index != before.index || strings.Join(after.resources, "\x00") != strings.Join(before.resources, "\x00") {
		h.t.Fatalf("the store changed: index %d -> %d, %d -> %d resources", before.index, after.index, len(before.resources), len(after.resources))
	}
}

// requireCode fails unless err is a status error with code and a message
// containing every part of want.
func requireCode(t testing.TB, err error, code codes.Code, want ...string) {
	t.Helper()
	st, ok := status.FromError(err)
	if err == nil || !ok {
		t.Fatalf("got error %v, want a status error %v", err, code)
	}
	if st.Code() != code {
		t.Fatalf("got code %v (%q), want %v", st.Code(), st.Message(), code)
	}
	for _, w := range want {
		if !strings.Contains(st.Message(), w) {
			t.Fatalf("message %q does not contain %q", st.Message(), w)
		}
	}
}

// policy is an Authorizer that refuses namespaces in deny, and operator
// permissions when denyOperator is set, recording every question asked.
type policy struct {
	deny         map[string]bool
	denyOperator bool

	mu    sync.Mutex
	calls []string
}

func (p *policy) record(call string, refuse bool) error {
	p.mu.Lock()
	p.calls = append(p.calls, call)
	p.mu.Unlock()
	if refuse {
		return fmt.Errorf("%w: test policy refuses %s", acl.ErrPermissionDenied, call)
	}
	return nil
}

func (p *policy) OperatorRead() error  { return p.record("operator:read", p.denyOperator) }
func (p *policy) OperatorWrite() error { return p.record("operator:write", p.denyOperator) }
func (p *policy) NamespaceRead(ns string) error {
	return p.record("namespace:read:"+ns, p.deny[ns])
}
func (p *policy) NamespaceWrite(ns string) error {
	return p.record("namespace:write:"+ns, p.deny[ns])
}
func (p *policy) Agent() error  { return p.record("agent", p.denyOperator) }
func (p *policy) Server() error { return p.record("server", p.denyOperator) }

func (p *policy) asked(call string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.calls {
		if c == call {
			return true
		}
	}
	return false
}

func (p *policy) reset() {
	p.mu.Lock()
	p.calls = nil
	p.mu.Unlock()
}
