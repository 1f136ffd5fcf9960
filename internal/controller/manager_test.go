package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

func TestManagerReconcilesExistingThenEveryChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		rec := &recorder{svc: h.svc}
		h.register(controller.Controller{Name: "deployments", ManagedType: deploymentType, Reconciler: rec})
		h.write(deploymentType, "a", "v1", nil)
		h.start()
		synctest.Wait()
		h.expect(rec) // not the leader yet

		h.setLeader(true)
		h.expect(rec, "a") // what exists when leadership is gained

		h.write(deploymentType, "b", "v1", nil)
		synctest.Wait()
		h.expect(rec, "b")

		h.write(deploymentType, "b", "v2", nil)
		synctest.Wait()
		h.expect(rec, "b")

		h.delete(deploymentType, "a")
		synctest.Wait()
		h.expect(rec, "a:gone")

		// A write of another type is not this controller's business.
		h.write(instanceType, "i", "", nil)
		synctest.Wait()
		h.expect(rec)

		labels := map[string]string{"controller": "deployments", "result": "success"}
		if got := h.metric("trellis_controller_reconciles_total", labels); got != 4 {
			t.Errorf("reconciles_total%v = %v, want 4", labels, got)
		}
		if got := h.metric("trellis_controller_reconcile_duration_seconds", map[string]string{"controller": "deployments"}); got != 4 {
			t.Errorf("reconcile_duration_seconds count = %v, want 4", got)
		}
		if got := h.metric("trellis_controller_queue_depth", map[string]string{"controller": "deployments"}); got != 0 {
			t.Errorf("queue_depth = %v, want 0", got)
		}
	})
}

func TestManagerMapsWatchedTypes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		deployments := &recorder{svc: h.svc}
		tasks := &recorder{svc: h.svc}
		h.register(controller.Controller{
			Name:        "deployments",
			ManagedType: deploymentType,
			Watches:     []controller.Watch{{Type: taskType, Map: controller.MapOwner}},
			Reconciler:  deployments,
		})
		h.register(controller.Controller{
			Name:        "tasks",
			ManagedType: taskType,
			// A task's data names the instance it is placed on.
			References: func(res *pbresource.Resource) []*pbresource.ID {
				v, err := resource.DecodeData[*wrapperspb.StringValue](res)
				if err != nil || v.GetValue() == "" {
					return nil
				}
				return []*pbresource.ID{id(instanceType, v.GetValue())}
			},
			Watches:    []controller.Watch{{Type: instanceType, Map: controller.MapReferencing}},
			Reconciler: tasks,
		})

		d := h.write(deploymentType, "d", "", nil)
		h.write(taskType, "t1", "i1", d.GetId())
		h.write(taskType, "t2", "i2", d.GetId())
		h.write(taskType, "loose", "i1", nil)
		h.write(instanceType, "i1", "", nil)
		h.write(instanceType, "i2", "", nil)
		h.start()
		h.setLeader(true)
		// Every task maps to its deployment too; the queue dedupes them.
		h.expect(deployments, "d")
		h.expect(tasks, "loose", "t1", "t2")

		h.write(taskType, "t1", "i1-v2", d.GetId())
		synctest.Wait()
		h.expect(deployments, "d")
		h.expect(tasks, "t1")

		h.write(taskType, "loose", "i2", nil) // no owner: maps to no deployment
		synctest.Wait()
		h.expect(deployments)
		h.expect(tasks, "loose")

		// t1 now names i1-v2, loose names i2.
		h.write(instanceType, "i1", "changed", nil)
		synctest.Wait()
		h.expect(tasks)
		h.write(instanceType, "i2", "changed", nil)
		synctest.Wait()
		h.expect(tasks, "loose", "t2")
		h.expect(deployments)

		h.delete(instanceType, "i2")
		synctest.Wait()
		h.expect(tasks, "loose", "t2")

		h.delete(taskType, "t2")
		synctest.Wait()
		h.expect(deployments, "d")
		h.expect(tasks, "t2:gone")
		// t2 is gone from the reference index too.
		h.write(instanceType, "i2", "back", nil)
		synctest.Wait()
		h.expect(tasks, "loose")
	})
}

func TestManagerResync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		rec := &recorder{svc: h.svc}
		h.register(controller.Controller{
			Name:         "deployments",
			ManagedType:  deploymentType,
			Reconciler:   rec,
			ResyncPeriod: 10 * time.Minute,
		})
		h.write(deploymentType, "a", "", nil)
		h.write(deploymentType, "b", "", nil)
		h.start()
		h.setLeader(true)
		h.expect(rec, "a", "b")

		// A periodic resync queues its requests evenly over a tenth of
		// the period (here 1 minute), not all at once.
		time.Sleep(10*time.Minute - time.Nanosecond)
		synctest.Wait()
		h.expect(rec)
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		h.expect(rec, "a")
		time.Sleep(30 * time.Second)
		synctest.Wait()
		h.expect(rec, "b")

		h.write(deploymentType, "c", "", nil)
		synctest.Wait()
		h.expect(rec, "c")
		time.Sleep(10*time.Minute - 30*time.Second)
		synctest.Wait()
		h.expect(rec, "a")
		time.Sleep(20 * time.Second)
		synctest.Wait()
		h.expect(rec, "b")
		time.Sleep(20 * time.Second)
		synctest.Wait()
		h.expect(rec, "c")
	})
}

func TestManagerLeadershipOnOffOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		var (
			mu        sync.Mutex
			blockOnce = true
			canceled  []string
		)
		rec := &recorder{svc: h.svc}
		rec.block = func(ctx context.Context, req controller.Request) {
			if req.ID.GetName() != "slow" {
				return
			}
			mu.Lock()
			block := blockOnce
			blockOnce = false
			mu.Unlock()
			if block {
				<-ctx.Done() // held in flight until leadership is lost
				mu.Lock()
				canceled = append(canceled, req.ID.GetName())
				mu.Unlock()
			}
		}
		starts := 0
		h.register(controller.Controller{Name: "deployments", ManagedType: deploymentType, Reconciler: rec, Workers: 2,
			OnStart: func() { starts++ }})
		running := map[string]string{}

		h.write(deploymentType, "a", "", nil)
		h.start()
		h.setLeader(true)
		h.expect(rec, "a")
		if got := h.metric("trellis_controller_running", running); got != 1 {
			t.Errorf("running = %v while leader, want 1", got)
		}

		h.write(deploymentType, "slow", "", nil)
		synctest.Wait() // slow is in flight, blocked

		h.setLeader(false) // returns once the controllers have stopped
		mu.Lock()
		if len(canceled) != 1 {
			t.Errorf("the reconcile in flight saw its context canceled %d times, want 1", len(canceled))
		}
		mu.Unlock()
		h.expect(rec, "slow") // it finished after the cancellation
		if got := h.metric("trellis_controller_running", running); got != 0 {
			t.Errorf("running = %v after losing leadership, want 0", got)
		}

		// Not the leader: nothing runs, however long we wait.
		h.write(deploymentType, "b", "", nil)
		h.delete(deploymentType, "a")
		time.Sleep(time.Hour)
		synctest.Wait()
		h.expect(rec)

		h.setLeader(false) // a repeated value changes nothing
		h.expect(rec)

		// Leading again: a fresh start over what exists now.
		h.setLeader(true)
		h.expect(rec, "b", "slow")
		h.write(deploymentType, "c", "", nil)
		synctest.Wait()
		h.expect(rec, "c")

		h.setLeader(true) // a repeated value changes nothing
		h.expect(rec)
		if starts != 2 {
			t.Errorf("OnStart called %d times over two terms, want 2", starts)
		}
	})
}

func TestManagerStopWaitsForReconcileThatIgnoresItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		var returned atomic.Bool
		h.register(controller.Controller{
			Name:        "stubborn",
			ManagedType: deploymentType,
			Reconciler: controller.ReconcileFunc(func(ctx context.Context, req controller.Request) error {
				time.Sleep(45 * time.Second) // ignores ctx
				returned.Store(true)
				return nil
			}),
		})
		h.write(deploymentType, "a", "", nil)
		h.start()
		h.setLeader(true) // a is in flight for 45s
		running := map[string]string{}

		h.leader <- false
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if got := h.metric("trellis_controller_running", running); got != 1 {
			t.Errorf("running = %v 31s into stopping, want 1: still waiting for the reconcile", got)
		}
		logs := h.logs.String()
		if !strings.Contains(logs, "controllers still stopping") || !strings.Contains(logs, "stubborn") {
			t.Errorf("the log does not name the controller that keeps stopping waiting:\n%s", logs)
		}

		time.Sleep(14 * time.Second)
		synctest.Wait()
		if got := h.metric("trellis_controller_running", running); got != 0 || !returned.Load() {
			t.Errorf("running = %v after the reconcile returned (returned: %v), want 0", got, returned.Load())
		}
	})
}

// gate blocks a mapper, and with it the informer that calls it, so that the
// informer's watch falls behind the writers and is cut off.
type gate struct {
	mu sync.Mutex
	ch chan struct{}
}

func (g *gate) arm() {
	g.mu.Lock()
	g.ch = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) open() {
	g.mu.Lock()
	close(g.ch)
	g.ch = nil
	g.mu.Unlock()
}

func (g *gate) mapper(next controller.Mapper) controller.Mapper {
	return func(ev controller.Event, look controller.Lookup) []controller.Request {
		g.mu.Lock()
		ch := g.ch
		g.mu.Unlock()
		if ch != nil {
			<-ch
		}
		return next(ev, look)
	}
}

func TestManagerResumesWatchCutOffWithoutLosingChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Each watcher may hold one undelivered event.
		h := newHarness(t, inmem.WithWatcherBuffer(1), inmem.WithMaxWatcherBuffer(1))
		rec := &recorder{svc: h.svc}
		var g gate
		h.register(controller.Controller{
			Name:        "deployments",
			ManagedType: deploymentType,
			Watches:     []controller.Watch{{Type: deploymentType, Map: g.mapper(controller.MapSelf)}},
			Reconciler:  rec,
		})
		h.write(deploymentType, "x", "", nil)
		h.write(deploymentType, "y", "", nil)
		h.start()
		h.setLeader(true)
		h.expect(rec, "x", "y")

		g.arm()
		h.write(deploymentType, "a", "", nil)
		synctest.Wait() // the informer is stuck mapping a
		// One batch, one index: b is buffered, c overflows and the watch is
		// cut off in the middle of the batch's events.
		h.writeBatch(deploymentType, "b", "c")
		h.delete(deploymentType, "x")
		h.write(deploymentType, "y", "v2", nil)
		g.open()
		synctest.Wait()

		h.expect(rec, "a", "b", "c", "x:gone", "y")
		if got := h.metric("trellis_controller_watch_restarts_total", map[string]string{"how": "resume"}); got != 1 {
			t.Errorf("watch_restarts_total{how=resume} = %v, want 1", got)
		}
		if got := h.metric("trellis_controller_watch_restarts_total", map[string]string{"how": "relist"}); got != -1 {
			t.Errorf("watch_restarts_total{how=relist} = %v, want none", got)
		}

		// The new watch carries on.
		h.write(deploymentType, "d", "", nil)
		synctest.Wait()
		h.expect(rec, "d")
	})
}

func TestManagerRelistsWhenWatchCannotResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// One undelivered event per watcher, and only the last event kept
		// for resuming: a watch cut off cannot resume.
		h := newHarness(t, inmem.WithWatcherBuffer(1), inmem.WithMaxWatcherBuffer(1), inmem.WithEventHistory(1))
		rec := &recorder{svc: h.svc}
		owners := &recorder{svc: h.svc}
		var g gate
		h.register(controller.Controller{
			Name:        "deployments",
			ManagedType: deploymentType,
			Watches:     []controller.Watch{{Type: deploymentType, Map: g.mapper(controller.MapSelf)}},
			Reconciler:  rec,
		})
		// A second controller maps deleted tasks to their owners: the
		// deletion found by listing again must carry the owner.
		h.register(controller.Controller{
			Name:        "owners",
			ManagedType: deploymentType,
			Watches:     []controller.Watch{{Type: taskType, Map: g.mapper(controller.MapOwner)}},
			Reconciler:  owners,
		})
		for _, n := range []string{"keep", "change", "drop", "recreate"} {
			h.write(deploymentType, n, "", nil)
		}
		d := h.write(deploymentType, "owner", "", nil)
		h.write(taskType, "t", "", d.GetId())
		h.start()
		h.setLeader(true)
		h.expect(rec, "change", "drop", "keep", "owner", "recreate")
		h.expect(owners, "change", "drop", "keep", "owner", "recreate")

		g.arm()
		h.write(deploymentType, "new", "", nil)
		h.write(taskType, "loose", "", nil)
		synctest.Wait() // both informers are stuck in their mappers
		h.write(deploymentType, "change", "v2", nil)
		h.delete(deploymentType, "drop")
		h.delete(deploymentType, "recreate")
		h.write(deploymentType, "recreate", "", nil)
		h.write(deploymentType, "late", "", nil)
		h.write(taskType, "loose2", "", nil) // buffered
		h.delete(taskType, "t")              // overflows: only the list will tell
		h.write(instanceType, "i", "", nil)  // pushes the last task event out of the history
		g.open()
		synctest.Wait()

		// "keep" did not change and is not reconciled again; "recreate" was
		// deleted and re-created and is reconciled once (by name).
		h.expect(rec, "change", "drop:gone", "late", "new", "recreate")
		h.expect(owners, "change", "drop:gone", "late", "new", "owner", "recreate")
		if got := h.metric("trellis_controller_watch_restarts_total", map[string]string{"how": "relist"}); got != 2 {
			t.Errorf("watch_restarts_total{how=relist} = %v, want 2 (one per type)", got)
		}

		h.write(deploymentType, "after", "", nil)
		synctest.Wait()
		h.expect(rec, "after")
	})
}

func TestManagerRetriesFailedReconcileWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		var (
			mu    sync.Mutex
			times []time.Duration
		)
		start := time.Now()
		h.register(controller.Controller{
			Name:        "deployments",
			ManagedType: deploymentType,
			Backoff:     controller.Backoff{Base: time.Second, Max: 4 * time.Second},
			Reconciler: controller.ReconcileFunc(func(ctx context.Context, req controller.Request) error {
				mu.Lock()
				defer mu.Unlock()
				times = append(times, time.Since(start))
				if len(times) < 5 {
					return errors.New("not yet")
				}
				return nil
			}),
		})
		h.write(deploymentType, "a", "", nil)
		h.start()
		h.setLeader(true)
		time.Sleep(time.Hour)
		synctest.Wait()

		mu.Lock()
		defer mu.Unlock()
		if len(times) != 5 {
			t.Fatalf("ran %d times, want 5 (4 failures, then success)", len(times))
		}
		// Delays within [ceiling/2, ceiling) for ceilings 1s, 2s, 4s, 4s.
		for i, ceiling := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second} {
			d := times[i+1] - times[i]
			if d < ceiling/2 || d >= ceiling {
				t.Errorf("retry %d after %s, want within [%s, %s)", i+1, d, ceiling/2, ceiling)
			}
		}
		if got := h.metric("trellis_controller_retries_total", map[string]string{"controller": "deployments"}); got != 4 {
			t.Errorf("retries_total = %v, want 4", got)
		}
		if got := h.metric("trellis_controller_reconciles_total", map[string]string{"controller": "deployments", "result": "error"}); got != 4 {
			t.Errorf("reconciles_total{result=error} = %v, want 4", got)
		}
	})
}

func TestManagerRegisterRefusesBadDeclarations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		ok := controller.Controller{Name: "ok", ManagedType: deploymentType, Reconciler: &recorder{svc: h.svc}}
		cases := []struct {
			name  string
			edit  func(*controller.Controller)
			field string
		}{
			{"no name", func(c *controller.Controller) { c.Name = "" }, "Name"},
			{"no reconciler", func(c *controller.Controller) { c.Reconciler = nil }, "Reconciler"},
			{"nothing to watch", func(c *controller.Controller) { c.ManagedType = nil }, "ManagedType"},
			{"partial type", func(c *controller.Controller) { c.ManagedType = &pbresource.Type{Group: "test"} }, "ManagedType"},
			{"watch without mapper", func(c *controller.Controller) { c.Watches = []controller.Watch{{Type: taskType}} }, "Watches[0].Map"},
			{"watch twice", func(c *controller.Controller) {
				c.Watches = []controller.Watch{{Type: taskType, Map: controller.MapOwner}, {Type: taskType, Map: controller.MapOwner}}
			}, "Watches[1].Type"},
			{"references without managed type", func(c *controller.Controller) {
				c.ManagedType = nil
				c.Watches = []controller.Watch{{Type: taskType, Map: controller.MapOwner}}
				c.References = func(*pbresource.Resource) []*pbresource.ID { return nil }
			}, "References"},
			{"negative workers", func(c *controller.Controller) { c.Workers = -1 }, "Workers"},
			{"negative resync", func(c *controller.Controller) { c.ResyncPeriod = -time.Second }, "ResyncPeriod"},
			{"max below base", func(c *controller.Controller) { c.Backoff = controller.Backoff{Base: time.Minute, Max: time.Second} }, "Backoff.Max"},
			{"negative pacing", func(c *controller.Controller) { c.Pacing = controller.Pacing{Factor: -1, Max: time.Second} }, "Pacing"},
			{"pacing without a bound", func(c *controller.Controller) { c.Pacing = controller.Pacing{Factor: 2} }, "Pacing.Max"},
			{"negative burst", func(c *controller.Controller) {
				c.Pacing = controller.Pacing{Factor: 2, Max: time.Second, Burst: -time.Second}
			}, "Pacing"},
		}
		for _, c := range cases {
			decl := ok
			c.edit(&decl)
			err := h.mgr.Register(decl)
			if !errors.Is(err, controller.ErrInvalidController) {
				t.Errorf("%s: Register = %v, want ErrInvalidController", c.name, err)
				continue
			}
			if !strings.Contains(err.Error(), c.field+":") {
				t.Errorf("%s: error %q does not name the field %s", c.name, err, c.field)
			}
		}
		if err := h.mgr.Register(ok); err != nil {
			t.Fatal(err)
		}
		if err := h.mgr.Register(ok); !errors.Is(err, controller.ErrDuplicateController) {
			t.Errorf("second registration = %v, want ErrDuplicateController", err)
		}
		h.start()
		synctest.Wait()
		other := ok
		other.Name = "late"
		if err := h.mgr.Register(other); !errors.Is(err, controller.ErrStarted) {
			t.Errorf("registration after Start = %v, want ErrStarted", err)
		}
	})
}

func TestManagerCallsCarryItsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := resource.NewRegistry()
		reg.Register(resource.Registration{Type: deploymentType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
		// The service refuses every call without the controllers' token.
		svc := resource.NewService(resource.Config{
			Backend:  inmem.NewBackend(),
			Registry: reg,
			Authorize: func(ctx context.Context) (acl.Authorizer, error) {
				if resource.TokenFromContext(ctx) != "controllers-token" {
					return nil, fmt.Errorf("%w: wrong token", acl.ErrPermissionDenied)
				}
				return acl.AllowAll{}, nil
			},
		})
		leader := make(chan bool)
		mgr, err := controller.NewManager(controller.Config{Client: svc, Leadership: leadership(leader), Token: "controllers-token"})
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder{svc: svc}
		if err := mgr.Register(controller.Controller{Name: "deployments", ManagedType: deploymentType, Reconciler: rec, ResyncPeriod: time.Minute}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- mgr.Start(ctx) }()
		defer func() {
			cancel()
			<-done
		}()
		leader <- true

		tokenCtx := resource.ContextWithToken(t.Context(), "controllers-token")
		data, _ := anypb.New(wrapperspb.String(""))
		if _, err := svc.Write(tokenCtx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: id(deploymentType, "a"), Data: data}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		// The watch saw the write, and the recorder's read inside Reconcile
		// (which uses the reconcile's context) was allowed.
		if got := rec.take(); !slices.Equal(got, []string{"a"}) {
			t.Errorf("reconciled %q, want [a]", got)
		}
		time.Sleep(time.Minute) // the resync's list is allowed too
		synctest.Wait()
		if got := rec.take(); !slices.Equal(got, []string{"a"}) {
			t.Errorf("after resync reconciled %q, want [a]", got)
		}
	})
}
