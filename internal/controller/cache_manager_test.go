package controller_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/storage/inmem"
)

// newCacheHarness is newHarness with a Manager whose cache checks that no
// reader modifies what it shares.
func newCacheHarness(t *testing.T, opts ...inmem.Option) *harness {
	t.Helper()
	h := newHarness(t, opts...)
	h.metrics = prometheus.NewRegistry()
	mgr, err := controller.NewManager(controller.Config{
		Client:     h.svc,
		Leadership: leadership(h.leader),
		Cache:      controller.NewCache(controller.CheckReadOnly()),
		Registerer: h.metrics,
		Logger:     slog.New(slog.NewTextHandler(h.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.mgr = mgr
	t.Cleanup(func() {
		if err := mgr.Cache().Verify(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// ownedTasks is a deployment controller that reads its tasks from the
// cache alone: its mapper finds the deployment of a task in the event,
// and checks that the cache already holds that event; its reconciler
// records "deployment: task=value ..." as the cache has them.
type ownedTasks struct {
	cache *controller.Cache

	mu     sync.Mutex
	got    []string
	stales []string
}

func (o *ownedTasks) mapTask(ev controller.Event, look controller.Lookup) []controller.Request {
	cached := look.Cache().Get(ev.Resource.GetId())
	o.mu.Lock()
	switch {
	case ev.Deleted && cached != nil:
		o.stales = append(o.stales, "deleted "+ev.Resource.GetId().GetName()+" is still cached")
	case !ev.Deleted && (cached == nil || cached.Resource.GetVersion() != ev.Resource.GetVersion()):
		o.stales = append(o.stales, "mapped "+ev.Resource.GetId().GetName()+" before the cache had it")
	}
	o.mu.Unlock()
	return controller.MapOwner(ev, look)
}

func (o *ownedTasks) Reconcile(_ context.Context, req controller.Request) error {
	var parts []string
	for _, t := range o.cache.ByIndex(taskType, controller.IndexOwner, controller.OwnerKey(req.ID)) {
		v, _ := controller.Decoded[*wrapperspb.StringValue](t)
		parts = append(parts, t.Resource.GetId().GetName()+"="+v.GetValue())
	}
	o.mu.Lock()
	o.got = append(o.got, req.ID.GetName()+":"+strings.Join(parts, ","))
	o.mu.Unlock()
	return nil
}

func (o *ownedTasks) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.got
	o.got = nil
	slices.Sort(out)
	return slices.Compact(out)
}

// last returns what the last reconcile saw.
func (o *ownedTasks) last() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) == 0 {
		return ""
	}
	return o.got[len(o.got)-1]
}

func (o *ownedTasks) controller(cache *controller.Cache) controller.Controller {
	o.cache = cache
	return controller.Controller{
		Name:        "deployments",
		ManagedType: deploymentType,
		Watches:     []controller.Watch{{Type: taskType, Map: o.mapTask}},
		Cached:      []controller.CachedType{{Type: taskType}},
		Reconciler:  o,
	}
}

func (o *ownedTasks) expect(t *testing.T, want ...string) {
	t.Helper()
	got := o.take()
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("reconciled %q, want %q", got, want)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.stales) > 0 {
		t.Errorf("the mapper ran ahead of the cache: %q", o.stales)
		o.stales = nil
	}
}

// The Manager's watches keep the cache, and a reconcile sees at least the
// change that caused it: what existed when leadership was gained, each
// write and delete after.
func TestCacheFollowsTheManagersWatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCacheHarness(t)
		o := &ownedTasks{}
		h.register(o.controller(h.mgr.Cache()))
		d := h.write(deploymentType, "d", "", nil).GetId()
		h.write(taskType, "t1", "a", d)
		h.start()
		h.setLeader(true)
		o.expect(t, "d:t1=a")
		if got := h.metric("trellis_controller_cache_objects", map[string]string{"type": "test/v1/Task"}); got != 1 {
			t.Errorf("cache_objects{type=test/v1/Task} = %v, want 1", got)
		}

		h.write(taskType, "t2", "b", d)
		synctest.Wait()
		o.expect(t, "d:t1=a,t2=b")

		h.write(taskType, "t1", "a2", d)
		synctest.Wait()
		o.expect(t, "d:t1=a2,t2=b")

		h.delete(taskType, "t2")
		synctest.Wait()
		o.expect(t, "d:t1=a2")

		// Another incarnation of t1, owned by e.
		e := h.write(deploymentType, "e", "", nil).GetId()
		synctest.Wait()
		o.expect(t, "e:")
		h.delete(taskType, "t1")
		synctest.Wait()
		o.expect(t, "d:")
		h.write(taskType, "t1", "a3", e)
		synctest.Wait()
		o.expect(t, "e:t1=a3")
		if got := h.mgr.Cache().ByIndex(taskType, controller.IndexOwner, controller.OwnerKey(d)); len(got) != 0 {
			t.Errorf("d still owns %q in the cache", names(got))
		}
	})
}

// A controller that reads the cache does not run before the types it
// reads are listed whole.
func TestCacheControllerWaitsForItsTypesToBeListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCacheHarness(t)
		var (
			mu   sync.Mutex
			seen []int
		)
		cache := h.mgr.Cache()
		h.register(controller.Controller{
			Name:        "deployments",
			ManagedType: deploymentType,
			Cached:      []controller.CachedType{{Type: instanceType}},
			Reconciler: controller.ReconcileFunc(func(context.Context, controller.Request) error {
				mu.Lock()
				seen = append(seen, len(cache.List(instanceType)))
				mu.Unlock()
				return nil
			}),
		})
		// Another controller's mapper holds the instance watch in the
		// middle of its first list.
		var g gate
		h.register(controller.Controller{
			Name:        "instances",
			ManagedType: instanceType,
			Watches:     []controller.Watch{{Type: instanceType, Map: g.mapper(controller.MapSelf)}},
			Reconciler:  controller.ReconcileFunc(func(context.Context, controller.Request) error { return nil }),
		})
		const n = 20
		for i := range n {
			h.write(instanceType, fmt.Sprintf("i%02d", i), "", nil)
		}
		h.write(deploymentType, "d", "", nil)
		g.arm()
		h.start()
		h.setLeader(true)
		mu.Lock()
		if len(seen) != 0 {
			t.Errorf("reconciled with %v instances cached, before they were listed", seen)
		}
		mu.Unlock()
		if cache.Synced(instanceType) {
			t.Error("synced in the middle of the list")
		}

		g.open()
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(seen, []int{n}) {
			t.Errorf("reconciles saw %v instances, want one reconcile that saw %d", seen, n)
		}
		if !cache.Synced(instanceType) {
			t.Error("not synced after the list")
		}
	})
}

// Each term starts the cache afresh: what changed while another server
// led is seen, deletions included.
func TestCacheStartsAfreshEachTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCacheHarness(t)
		o := &ownedTasks{}
		h.register(o.controller(h.mgr.Cache()))
		d := h.write(deploymentType, "d", "", nil).GetId()
		h.write(taskType, "t1", "a", d)
		h.write(taskType, "t2", "b", d)
		h.start()
		h.setLeader(true)
		o.expect(t, "d:t1=a,t2=b")

		h.setLeader(false)
		if got := h.mgr.Cache().List(taskType); len(got) != 0 {
			t.Errorf("the cache holds %q after the term ended, want nothing", names(got))
		}
		h.delete(taskType, "t1")
		h.write(taskType, "t2", "b2", d)
		h.write(taskType, "t3", "c", d)
		synctest.Wait()
		o.expect(t)

		h.setLeader(true)
		o.expect(t, "d:t2=b2,t3=c")
	})
}

// A watch that cannot resume lists again; the cache follows the
// difference, deletions included.
func TestCacheFollowsARelist(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// One undelivered event per watcher, and only the last event kept
		// for resuming: a watch cut off cannot resume.
		h := newCacheHarness(t, inmem.WithWatcherBuffer(1), inmem.WithMaxWatcherBuffer(1), inmem.WithEventHistory(1))
		o := &ownedTasks{}
		ctl := o.controller(h.mgr.Cache())
		var g gate
		ctl.Watches[0].Map = g.mapper(ctl.Watches[0].Map)
		h.register(ctl)
		d := h.write(deploymentType, "d", "", nil).GetId()
		h.write(taskType, "t1", "a", d)
		h.write(taskType, "t2", "b", d)
		h.start()
		h.setLeader(true)
		o.expect(t, "d:t1=a,t2=b")

		g.arm()
		h.write(taskType, "t3", "c", d)
		synctest.Wait()                 // the task informer is stuck mapping t3
		h.write(taskType, "t4", "d", d) // buffered
		h.delete(taskType, "t1")        // overflows: only the list will tell
		h.write(instanceType, "i", "", nil)
		g.open()
		synctest.Wait()
		// The runs mapped from t3 and t4 may have seen t1 still there; the
		// last one, mapped from the list's deletion, sees it gone.
		if got := o.last(); got != "d:t2=b,t3=c,t4=d" {
			t.Errorf("last reconcile saw %q, want d:t2=b,t3=c,t4=d", got)
		}
		o.take()
		o.expect(t) // and no mapper ran ahead of the cache
		if got := h.metric("trellis_controller_watch_restarts_total", map[string]string{"how": "relist"}); got != 1 {
			t.Errorf("watch_restarts_total{how=relist} = %v, want 1", got)
		}
	})
}

func TestManagerRefusesConflictingIndexes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newCacheHarness(t)
		decl := func(name string, x *controller.Index) controller.Controller {
			return controller.Controller{
				Name: name, ManagedType: deploymentType,
				Cached:     []controller.CachedType{{Type: taskType, Indexes: []*controller.Index{x}}},
				Reconciler: controller.ReconcileFunc(func(context.Context, controller.Request) error { return nil }),
			}
		}
		h.register(decl("a", byValue))
		h.register(decl("b", byValue)) // the same index, shared
		err := h.mgr.Register(decl("c", &controller.Index{Name: "value", Keys: byValue.Keys}))
		if err == nil || !strings.Contains(err.Error(), "c: Cached: index value") {
			t.Errorf("Register of another index of the same name = %v, want an error naming controller c and the index", err)
		}
	})
}
