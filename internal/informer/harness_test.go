package informer_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/testlog"
)

// itemType is a tiny type for the tests: its data is the group it belongs
// to, which byGroup indexes (as service instances are indexed by their
// service).
var itemType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Item"}

var byGroup = &controller.Index{Name: "group", Keys: func(o *controller.Object) []string {
	v, ok := controller.Decoded[*wrapperspb.StringValue](o)
	if !ok || v.GetValue() == "" {
		return nil
	}
	return []string{v.GetValue()}
}}

// harness is an informer over the real resource service on an in-memory
// store, reached through a watcher the test can break.
type harness struct {
	t       tb
	log     testing.TB
	reg     *resource.Registry
	backend *inmem.Backend
	api     resource.API
	src     *breakable
	in      *informer.Informer
}

// tb is what the harness needs of a test: *testing.T's or rapid's.
type tb interface {
	Helper()
	Fatal(...any)
	Fatalf(string, ...any)
	Errorf(string, ...any)
	Cleanup(func())
}

// newHarness makes a harness for t, logging to log's test.
func newHarness(t tb, log testing.TB, local bool) *harness {
	t.Helper()
	reg := resource.NewRegistry()
	core.Register(reg)
	reg.Register(resource.Registration{Type: itemType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
	backend := inmem.NewBackend()
	svc := resource.NewService(resource.Config{Backend: backend, Registry: reg, Logger: testlog.Logger(log)})
	if err := core.Bootstrap(context.Background(), svc); err != nil {
		t.Fatal(err)
	}
	src := &breakable{inner: svc}
	in, err := informer.New(informer.Config{
		Source:        src,
		Local:         local,
		LocalIndex:    backend.Store().Index,
		CheckReadOnly: true,
		Retry:         backoff.Policy{Base: time.Millisecond, Max: time.Millisecond},
		Logger:        testlog.Logger(log),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Declare(controller.CachedType{Type: itemType, Indexes: []*controller.Index{byGroup}}); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, log: log, reg: reg, backend: backend, api: svc, src: src, in: in}
}

// server is another server: the resource service on a store of its own,
// holding what the harness's store holds now, as of its index. The store
// stays there (a server that lags) until caughtUpWith.
func (h *harness) server() (*resource.Service, *inmem.Backend) {
	h.t.Helper()
	backend := inmem.NewBackend()
	h.caughtUpWith(backend)
	return resource.NewService(resource.Config{Backend: backend, Registry: h.reg, Logger: testlog.Logger(h.log)}), backend
}

// caughtUpWith brings backend's store to what the harness's store holds
// now, as a server that installs the leader's snapshot does.
func (h *harness) caughtUpWith(backend *inmem.Backend) {
	h.t.Helper()
	var all []*pbresource.Resource
	idx, err := h.backend.Store().ForEach(func(res *pbresource.Resource) error {
		all = append(all, res)
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := backend.Store().Restore(idx, all); err != nil {
		h.t.Fatal(err)
	}
}

// start runs the informer until the test ends.
func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.in.Start(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("informer: %v", err)
		}
	})
}

func itemID(name string) *pbresource.ID {
	return &pbresource.ID{Type: itemType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name}
}

// put writes item name in group and returns the stored resource.
func (h *harness) put(name, group string) *pbresource.Resource {
	h.t.Helper()
	data, _ := anypb.New(wrapperspb.String(group))
	out, err := h.api.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: itemID(name), Data: data}})
	if err != nil {
		h.t.Fatal(err)
	}
	return out.GetResource()
}

// putBatch writes items in one batch (their changes share an index).
func (h *harness) putBatch(names []string, group string) {
	h.t.Helper()
	req := &pbresource.WriteBatchRequest{}
	for _, name := range names {
		data, _ := anypb.New(wrapperspb.String(group))
		req.Resources = append(req.Resources, &pbresource.Resource{Id: itemID(name), Data: data})
	}
	if _, err := h.api.WriteBatch(context.Background(), req); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) remove(name string) {
	h.t.Helper()
	if _, err := h.api.Delete(context.Background(), &pbresource.DeleteRequest{Id: itemID(name)}); err != nil {
		h.t.Fatal(err)
	}
}

// caughtUp waits until the informer has applied every change the store
// has made.
func (h *harness) caughtUp() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.in.WaitIndex(ctx, itemType, h.backend.Store().Index()); err != nil {
		h.t.Fatal(err)
	}
}

// stored is what the store holds of the items: name → "uid@version".
func (h *harness) stored() map[string]string {
	h.t.Helper()
	list, err := h.backend.List(context.Background(), storage.EventualConsistency, itemType, &pbresource.Tenancy{Namespace: "default"}, "")
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]string{}
	for _, res := range list {
		out[res.GetId().GetName()] = stamp(res)
	}
	return out
}

// storedGroups recomputes byGroup from the store: group → sorted names.
func (h *harness) storedGroups() map[string][]string {
	h.t.Helper()
	list, err := h.backend.List(context.Background(), storage.EventualConsistency, itemType, &pbresource.Tenancy{Namespace: "default"}, "")
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string][]string{}
	for _, res := range list {
		v, err := resource.DecodeData[*wrapperspb.StringValue](res)
		if err != nil {
			h.t.Fatal(err)
		}
		out[v.GetValue()] = append(out[v.GetValue()], res.GetId().GetName())
	}
	for _, names := range out {
		sort.Strings(names)
	}
	return out
}

func stamp(res *pbresource.Resource) string {
	return res.GetId().GetUid() + "@" + res.GetVersion()
}

// model is what a subscriber builds from its deltas alone, checking each
// against what it had: a lost or doubled delta shows as a delta that does
// not fit (an Added of a name it holds, a Changed or Removed whose Old is
// not what it holds), or as a model that differs from the store.
type model struct {
	mu       sync.Mutex
	held     map[string]string
	problems []string
	deltas   int
}

func newModel() *model { return &model{held: map[string]string{}} }

func (m *model) take(d informer.Delta) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deltas++
	name := d.Resource().GetId().GetName()
	have, ok := m.held[name]
	switch d.Op {
	case informer.Added:
		if ok {
			m.problems = append(m.problems, fmt.Sprintf("added %s, which it holds as %s", name, have))
		}
		if d.Old != nil || d.New == nil {
			m.problems = append(m.problems, fmt.Sprintf("added %s with old %v new %v", name, d.Old != nil, d.New != nil))
		}
		m.held[name] = stamp(d.New.Resource)
	case informer.Changed:
		switch {
		case !ok:
			m.problems = append(m.problems, fmt.Sprintf("changed %s, which it does not hold", name))
		case have != stamp(d.Old.Resource):
			m.problems = append(m.problems, fmt.Sprintf("changed %s from %s, but it holds %s", name, stamp(d.Old.Resource), have))
		case d.Old.Resource.GetId().GetUid() != d.New.Resource.GetId().GetUid():
			m.problems = append(m.problems, fmt.Sprintf("changed %s to another incarnation", name))
		case have == stamp(d.New.Resource):
			m.problems = append(m.problems, fmt.Sprintf("changed %s to what it holds: a repeat", name))
		}
		m.held[name] = stamp(d.New.Resource)
	case informer.Removed:
		switch {
		case !ok:
			m.problems = append(m.problems, fmt.Sprintf("removed %s, which it does not hold", name))
		case have != stamp(d.Old.Resource):
			m.problems = append(m.problems, fmt.Sprintf("removed %s as %s, but it holds %s", name, stamp(d.Old.Resource), have))
		}
		delete(m.held, name)
	}
}

func (m *model) snapshot() (map[string]string, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	held := make(map[string]string, len(m.held))
	for k, v := range m.held {
		held[k] = v
	}
	return held, append([]string(nil), m.problems...)
}

// cached is what the informer's cache holds: name → "uid@version".
func (h *harness) cached() map[string]string {
	out := map[string]string{}
	for _, o := range h.in.List(itemType) {
		out[o.Resource.GetId().GetName()] = stamp(o.Resource)
	}
	return out
}

// cachedGroups is byGroup as the informer serves it, for the groups
// named.
func (h *harness) cachedGroups(groups []string) map[string][]string {
	out := map[string][]string{}
	for _, g := range groups {
		for _, o := range h.in.ByIndex(itemType, byGroup.Name, g) {
			out[g] = append(out[g], o.Resource.GetId().GetName())
		}
	}
	return out
}

// breakable is a resource.Watcher whose open watches the test can break,
// and which records what each watch was opened after.
type breakable struct {
	inner resource.Watcher

	mu    sync.Mutex
	open  []storage.Watch
	since []uint64
	// refuse, when set, is asked before each watch is opened: a non-nil
	// error fails the open.
	refuse func(since uint64) error
}

func (b *breakable) setRefuse(f func(since uint64) error) {
	b.mu.Lock()
	b.refuse = f
	b.mu.Unlock()
}

// moveTo makes the watches from now on open on server (as a link does
// that fails over), refused as refuse says (nil: none).
func (b *breakable) moveTo(server resource.Watcher, refuse func(since uint64) error) {
	b.mu.Lock()
	b.inner, b.refuse = server, refuse
	b.mu.Unlock()
}

func (b *breakable) Watch(ctx context.Context, req *pbresource.WatchListRequest) (storage.Watch, error) {
	b.mu.Lock()
	b.since = append(b.since, req.GetSinceIndex())
	refuse, inner := b.refuse, b.inner
	b.mu.Unlock()
	if refuse != nil {
		if err := refuse(req.GetSinceIndex()); err != nil {
			return nil, err
		}
	}
	w, err := inner.Watch(ctx, req)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.open = append(b.open, w)
	b.mu.Unlock()
	return w, nil
}

// breakAll ends every watch opened so far.
func (b *breakable) breakAll() {
	b.mu.Lock()
	open := b.open
	b.open = nil
	b.mu.Unlock()
	for _, w := range open {
		w.Close()
	}
}

func (b *breakable) opens() []uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]uint64(nil), b.since...)
}
