package controller_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

func stringData(t *testing.T, v string) *anypb.Any {
	t.Helper()
	a, err := anypb.New(wrapperspb.String(v))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// What is written through SeeingWrites is in the cache as the store
// answered it, filed and derived, before any watch: a Write, a
// WriteBatch, a WriteStatus, the members of a WriteStatuses that were
// not refused, and a deletion of the incarnation named, done or found
// gone. A refused write changes nothing, and neither does a deletion
// refused as stale: the store still holds the resource, newer. Types not
// cached pass through.
func TestSeeingWrites(t *testing.T) {
	reg := resource.NewRegistry()
	for _, typ := range []*pbresource.Type{taskType, instanceType} {
		reg.Register(resource.Registration{Type: typ, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
	}
	api := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	c := newTaskCache(t)
	w := c.SeeingWrites(api)
	ctx := context.Background()
	cachedVersion := func(name string) string {
		o := c.Get(id(taskType, name))
		if o == nil {
			return "none"
		}
		return o.Resource.GetVersion()
	}

	one, err := w.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id(taskType, "a"), Data: stringData(t, "x")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(c.ByIndex(taskType, "value", "x")); len(got) != 1 || got[0] != "a@"+one.GetResource().GetVersion() {
		t.Fatalf("after a Write the index holds %v", got)
	}
	batch, err := w.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: []*pbresource.Resource{
		{Id: id(taskType, "b"), Data: stringData(t, "y")},
		{Id: id(instanceType, "i1"), Data: stringData(t, "x")}, // not cached
	}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := controller.DerivedOf[string](c.Get(id(taskType, "b")), tagged); v != "y@"+batch.GetResources()[0].GetVersion() {
		t.Fatalf("after a WriteBatch the derived value is %q", v)
	}
	// A batch's status entries: what they left is in the cache too.
	withStatus, err := w.WriteBatch(ctx, &pbresource.WriteBatchRequest{
		Resources: []*pbresource.Resource{{Id: id(taskType, "c"), Data: stringData(t, "z")}},
		Statuses:  []*pbresource.WriteStatusRequest{{Id: batch.GetResources()[0].GetId(), Key: "test", Status: &pbresource.Status{}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cachedVersion("b"), withStatus.GetStatuses()[0].GetVersion(); got != want {
		t.Fatalf("after a WriteBatch's status entry the cache holds b@%s, want @%s", got, want)
	}
	if _, ok := c.Get(id(taskType, "b")).Resource.GetStatus()["test"]; !ok {
		t.Fatal("the cached b has no status entry test")
	}
	batch.GetResources()[0] = withStatus.GetStatuses()[0] // b as it is now

	// A refused write (a stale version) changes nothing.
	if _, err := w.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id(taskType, "a"), Version: "999999", Data: stringData(t, "y")}}); status.Code(err) != codes.Aborted {
		t.Fatalf("a stale write: %v", err)
	}
	if got := names(c.ByIndex(taskType, "value", "y")); len(got) != 1 {
		t.Fatalf("after a refused write the index holds %v", got)
	}

	// Statuses: one written, and a batch of one written and one refused.
	st, err := w.WriteStatus(ctx, &pbresource.WriteStatusRequest{Id: one.GetResource().GetId(), Key: "test", Status: &pbresource.Status{ObservedGeneration: one.GetResource().GetGeneration()}})
	if err != nil {
		t.Fatal(err)
	}
	if got := cachedVersion("a"); got != st.GetResource().GetVersion() {
		t.Fatalf("after a WriteStatus the cache holds a@%s, want @%s", got, st.GetResource().GetVersion())
	}
	sts, err := w.WriteStatuses(ctx, &pbresource.WriteStatusesRequest{Statuses: []*pbresource.WriteStatusRequest{
		{Id: batch.GetResources()[0].GetId(), Key: "test", Status: &pbresource.Status{}},
		{Id: one.GetResource().GetId(), Version: one.GetResource().GetVersion(), Key: "test", Status: &pbresource.Status{}}, // stale
	}})
	if err != nil {
		t.Fatal(err)
	}
	if r := sts.GetResults(); r[0].GetError() != nil || r[1].GetError() == nil {
		t.Fatalf("WriteStatuses results: %v", r)
	}
	if got := cachedVersion("b"); got != sts.GetResults()[0].GetResource().GetVersion() {
		t.Fatalf("after WriteStatuses the cache holds b@%s, want @%s", got, sts.GetResults()[0].GetResource().GetVersion())
	}
	if got := cachedVersion("a"); got != st.GetResource().GetVersion() {
		t.Fatalf("a refused member of WriteStatuses moved a to @%s", got)
	}

	// A deletion without the uid is the watch's to bring; with it, at once.
	if _, err := w.Delete(ctx, &pbresource.DeleteRequest{Id: id(taskType, "b")}); err != nil {
		t.Fatal(err)
	}
	if c.Get(id(taskType, "b")) == nil {
		t.Fatal("a deletion naming no incarnation was applied")
	}
	// A deletion refused as stale: someone else wrote a since the cache
	// had it (the watch has not brought it yet). It stays, to be deleted
	// at the version the watch brings.
	aID := st.GetResource().GetId()
	if _, err := api.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: aID, Version: st.GetResource().GetVersion(), Data: stringData(t, "x2")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Delete(ctx, &pbresource.DeleteRequest{Id: aID, Version: st.GetResource().GetVersion()}); status.Code(err) != codes.Aborted {
		t.Fatalf("a stale delete: %v", err)
	}
	if got := cachedVersion("a"); got != st.GetResource().GetVersion() {
		t.Fatalf("after a deletion refused as stale the cache holds a@%s, want it kept at @%s", got, st.GetResource().GetVersion())
	}
	if _, err := w.Delete(ctx, &pbresource.DeleteRequest{Id: aID}); err != nil {
		t.Fatal(err)
	}
	if c.Get(id(taskType, "a")) != nil {
		t.Fatal("a deletion through SeeingWrites is not in the cache")
	}
	// One that finds its incarnation gone is applied too (b was deleted
	// above without the cache knowing).
	if _, err := w.Delete(ctx, &pbresource.DeleteRequest{Id: batch.GetResources()[0].GetId()}); err != nil && status.Code(err) != codes.NotFound {
		t.Fatalf("deleting b again: %v", err)
	}
	if c.Get(id(taskType, "b")) != nil {
		t.Fatal("a deletion that found nothing left the incarnation in the cache")
	}
	if err := c.Verify(); err != nil {
		t.Fatal(err)
	}
}

// countingMake is a Derived that counts how often it was made, by
// name@version.
type countingMake struct {
	mu    sync.Mutex
	made  map[string]int
	total int
}

func (m *countingMake) derived() *controller.Derived {
	return &controller.Derived{Name: "counted", Make: func(o *controller.Object) any {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.made[o.Resource.GetId().GetName()+"@"+o.Resource.GetVersion()]++
		m.total++
		return nil
	}}
}

func (m *countingMake) counts() (map[string]int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.made), m.total
}

// A controller's write seen through SeeingWrites is one change to the
// cache, not two: when the watch brings it back, the cache has it at that
// version already and neither decodes nor derives it again, nor moves the
// type's revision; the controller's mappers still see the event, and a
// reconcile follows it. (Before, a placement was decoded and derived once
// as the scheduler applied it and again when the watch brought it.) The
// watch is held back while the controller writes, so that it brings each
// write strictly after: a watch that races a write may have both derive
// it, one of them for nothing.
func TestSeeingWritesDerivesEachWriteOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCacheHarness(t)
		count := &countingMake{made: map[string]int{}}
		o := &ownedTasks{}
		ctl := o.controller(h.mgr.Cache())
		ctl.Cached = []controller.CachedType{{Type: taskType, Derived: []*controller.Derived{count.derived()}}}
		// The cache may now be ahead of an event the watch brings: only
		// never behind it (ownedTasks' own mapper checks for exactly the
		// event's version).
		var g gate
		ctl.Watches[0].Map = g.mapper(controller.MapOwner)
		h.register(ctl)
		d := h.write(deploymentType, "d", "", nil).GetId()
		h.start()
		h.setLeader(true)
		o.expect(t, "d:")

		// The task watch stops in the mapper of a first task, which the
		// cache has.
		g.arm()
		h.write(taskType, "first", "b", d)
		synctest.Wait()

		cache := h.mgr.Cache()
		w := cache.SeeingWrites(h.svc)
		var batch []*pbresource.Resource
		for i := range 5 {
			batch = append(batch, &pbresource.Resource{Id: id(taskType, fmt.Sprintf("t%d", i)), Owner: d, Data: stringData(t, "a")})
		}
		out, err := w.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: batch})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteStatus(h.ctx, &pbresource.WriteStatusRequest{Id: out.GetResources()[0].GetId(), Key: "test", Status: &pbresource.Status{}}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Delete(h.ctx, &pbresource.DeleteRequest{Id: out.GetResources()[1].GetId()}); err != nil {
			t.Fatal(err)
		}
		events := func(source, result string) float64 {
			return h.metric("trellis_controller_cache_events_total", map[string]string{"type": "test/v1/Task", "source": source, "result": result})
		}
		check := func(when string, want map[string]float64) {
			t.Helper()
			for _, source := range []string{"watch", "write", "apply"} {
				for _, result := range []string{"changed", "repeat"} {
					if got := events(source, result); got != want[source+" "+result] {
						t.Errorf("%s: cache_events_total{source=%s,result=%s} = %v, want %v", when, source, result, got, want[source+" "+result])
					}
				}
			}
		}
		check("written", map[string]float64{"watch changed": 1, "write changed": 7})
		rev := cache.Revision(taskType)

		g.open()
		synctest.Wait() // the watch brings the seven back, and the reconciles run
		if got := cache.Revision(taskType); got != rev {
			t.Errorf("the watch bringing back what the cache had moved the revision %d -> %d", rev, got)
		}
		check("brought back", map[string]float64{"watch changed": 1, "write changed": 7, "watch repeat": 7})
		o.expect(t, "d:first=b,t0=a,t2=a,t3=a,t4=a")

		made, total := count.counts()
		if total != 7 {
			t.Errorf("%d derivations for 7 versions: %v", total, made)
		}
		for k, n := range made {
			if n != 1 {
				t.Errorf("%s derived %d times", k, n)
			}
		}
		if keys := slices.Sorted(maps.Keys(made)); len(keys) != 7 {
			t.Errorf("derived %q, want the first task, the five placements and the status", keys)
		}
	})
}
