package controller

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// startRunner runs a controller's workers, without watches, until the test
// ends. Call it inside a synctest bubble.
func startRunner(t *testing.T, ctl Controller) (*runner, *metrics) {
	t.Helper()
	if ctl.ManagedType == nil {
		ctl.ManagedType = testType
	}
	if ctl.Name == "" {
		ctl.Name = "test"
	}
	if err := ctl.validate(); err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(ctl, nil, discard, m)
	r.queue.rand = func() float64 { return 0 } // retries after half the ceiling
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r, m
}

// calls records when each request was reconciled.
type calls struct {
	mu    sync.Mutex
	start time.Time
	at    map[string][]time.Duration
}

func newCalls() *calls { return &calls{start: time.Now(), at: map[string][]time.Duration{}} }

func (c *calls) record(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at[name] = append(c.at[name], time.Since(c.start))
	return len(c.at[name])
}

func (c *calls) times(name string) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.at[name]...)
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRunnerNeverRunsOneRequestConcurrently(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu       sync.Mutex
			inFlight = map[string]int{}
			maxSeen  = map[string]int{}
			runs     = map[string]int{}
			release  = make(chan struct{})
		)
		r, _ := startRunner(t, Controller{
			Workers: 4,
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				name := req.ID.GetName()
				mu.Lock()
				inFlight[name]++
				runs[name]++
				maxSeen[name] = max(maxSeen[name], inFlight[name])
				mu.Unlock()
				<-release
				mu.Lock()
				inFlight[name]--
				mu.Unlock()
				return nil
			}),
		})
		r.queue.Add(req("a"))
		synctest.Wait() // a is running and blocked
		for range 5 {
			r.queue.Add(req("a"))
		}
		r.queue.Add(req("b"))
		r.queue.Add(req("c"))
		synctest.Wait()

		mu.Lock()
		if inFlight["a"] != 1 || inFlight["b"] != 1 || inFlight["c"] != 1 {
			t.Errorf("in flight = %v, want a, b and c once each (free workers take other requests)", inFlight)
		}
		mu.Unlock()

		close(release)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if maxSeen["a"] != 1 {
			t.Errorf("a ran %d times concurrently, want never more than 1", maxSeen["a"])
		}
		if runs["a"] != 2 {
			t.Errorf("a ran %d times, want 2: once, then once more for all the changes during that run", runs["a"])
		}
		if runs["b"] != 1 || runs["c"] != 1 {
			t.Errorf("runs = %v, want b and c once", runs)
		}
	})
}

func TestRunnerWorkersBoundConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu       sync.Mutex
			inFlight int
			peak     int
			release  = make(chan struct{})
		)
		r, _ := startRunner(t, Controller{
			Workers: 3,
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				mu.Lock()
				inFlight++
				peak = max(peak, inFlight)
				mu.Unlock()
				<-release
				mu.Lock()
				inFlight--
				mu.Unlock()
				return nil
			}),
		})
		for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
			r.queue.Add(req(n))
		}
		synctest.Wait()
		mu.Lock()
		if inFlight != 3 {
			t.Errorf("in flight = %d, want 3 (Workers)", inFlight)
		}
		mu.Unlock()
		if n := r.queue.Len(); n != 3 {
			t.Errorf("queue depth = %d, want the 3 waiting", n)
		}
		close(release)
		synctest.Wait()
		if peak != 3 {
			t.Errorf("peak concurrency = %d, want 3", peak)
		}
	})
}

func TestRunnerRecoversPanicAndRetriesWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		r, m := startRunner(t, Controller{
			Backoff: Backoff{Base: time.Second, Max: time.Minute},
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				if c.record(req.ID.GetName()) == 1 {
					var nilMap map[string]int
					//lint:ignore SA5000 a real runtime panic is the point
					nilMap["boom"]++
				}
				return nil
			}),
		})
		r.queue.Add(req("a"))
		time.Sleep(time.Hour)
		synctest.Wait()

		if got, want := c.times("a"), []time.Duration{0, 500 * time.Millisecond}; !equalDurations(got, want) {
			t.Errorf("runs at %v, want %v: the panic is retried after the first backoff", got, want)
		}
		if got := testutil.ToFloat64(m.reconciles.WithLabelValues("test", resultPanic)); got != 1 {
			t.Errorf("reconciles{result=panic} = %v, want 1", got)
		}
		if got := testutil.ToFloat64(m.reconciles.WithLabelValues("test", resultSuccess)); got != 1 {
			t.Errorf("reconciles{result=success} = %v, want 1", got)
		}
		if got := testutil.ToFloat64(m.retries.WithLabelValues("test")); got != 1 {
			t.Errorf("retries = %v, want 1", got)
		}
		if n := r.queue.Failures(req("a")); n != 0 {
			t.Errorf("failures = %d after success, want 0", n)
		}
	})
}

func TestRunnerErrorBackoffResetsOnSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		// Fail, fail, succeed; then (after a new change) fail, succeed.
		results := []error{errors.New("e1"), errors.New("e2"), nil, errors.New("e3"), nil}
		var mu sync.Mutex
		r, m := startRunner(t, Controller{
			Backoff: Backoff{Base: time.Second, Max: time.Minute},
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				c.record(req.ID.GetName())
				mu.Lock()
				defer mu.Unlock()
				err := results[0]
				results = results[1:]
				return err
			}),
		})
		r.queue.Add(req("a"))
		time.Sleep(10 * time.Second)
		r.queue.Add(req("a")) // a change at 10s
		time.Sleep(time.Hour)
		synctest.Wait()

		want := []time.Duration{
			0,                        // e1
			500 * time.Millisecond,   // e2, after base/2
			1500 * time.Millisecond,  // success, after a further base
			10 * time.Second,         // e3
			10500 * time.Millisecond, // success, after base/2 again: the count was reset
		}
		if got := c.times("a"); !equalDurations(got, want) {
			t.Errorf("runs at %v, want %v", got, want)
		}
		if got := testutil.ToFloat64(m.reconciles.WithLabelValues("test", resultError)); got != 3 {
			t.Errorf("reconciles{result=error} = %v, want 3", got)
		}
		if got := testutil.ToFloat64(m.retries.WithLabelValues("test")); got != 3 {
			t.Errorf("retries = %v, want 3", got)
		}
	})
}

func TestRunnerTerminalErrorIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		r, m := startRunner(t, Controller{
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				c.record(req.ID.GetName())
				return Terminal(errors.New("spec names an image that cannot exist"))
			}),
		})
		r.queue.Add(req("a"))
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		if got := c.times("a"); len(got) != 1 {
			t.Errorf("runs at %v, want exactly one: a terminal error is not retried", got)
		}
		if got := testutil.ToFloat64(m.reconciles.WithLabelValues("test", resultTerminal)); got != 1 {
			t.Errorf("reconciles{result=terminal} = %v, want 1", got)
		}
		if got := testutil.ToFloat64(m.retries.WithLabelValues("test")); got != 0 {
			t.Errorf("retries = %v, want 0", got)
		}

		// A new change runs it again.
		r.queue.Add(req("a"))
		synctest.Wait()
		if got := c.times("a"); len(got) != 2 {
			t.Errorf("runs at %v, want a second run after the change", got)
		}
	})
}

func TestRunnerRequeueAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		r, m := startRunner(t, Controller{
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				if c.record(req.ID.GetName()) < 3 {
					return RequeueAfter(30 * time.Second)
				}
				return nil
			}),
		})
		r.queue.Add(req("a"))
		time.Sleep(time.Hour)
		synctest.Wait()
		if got, want := c.times("a"), []time.Duration{0, 30 * time.Second, 60 * time.Second}; !equalDurations(got, want) {
			t.Errorf("runs at %v, want %v", got, want)
		}
		if got := testutil.ToFloat64(m.reconciles.WithLabelValues("test", resultRequeue)); got != 2 {
			t.Errorf("reconciles{result=requeue} = %v, want 2", got)
		}
		if got := testutil.ToFloat64(m.retries.WithLabelValues("test")); got != 0 {
			t.Errorf("retries = %v, want 0: a requeue is not a failure", got)
		}
	})
}

func TestRunnerWrappedRequeueAndTerminalAreRecognised(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		r, m := startRunner(t, Controller{
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				n := c.record(req.ID.GetName())
				switch {
				case req.ID.GetName() == "t":
					return errors.Join(errors.New("context"), Terminal(errors.New("bad")))
				case n == 1:
					return errors.Join(errors.New("context"), RequeueAfter(time.Minute))
				}
				return nil
			}),
		})
		r.queue.Add(req("r"))
		r.queue.Add(req("t"))
		time.Sleep(time.Hour)
		synctest.Wait()
		if got, want := c.times("r"), []time.Duration{0, time.Minute}; !equalDurations(got, want) {
			t.Errorf("r ran at %v, want %v", got, want)
		}
		if got := c.times("t"); len(got) != 1 {
			t.Errorf("t ran at %v, want once", got)
		}
		if got := testutil.ToFloat64(m.retries.WithLabelValues("test")); got != 0 {
			t.Errorf("retries = %v, want 0", got)
		}
	})
}

func TestRunnerStopWaitsForReconcileInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := newMetrics(nil)
		if err != nil {
			t.Fatal(err)
		}
		var finished bool
		ctl := Controller{
			Name:        "test",
			ManagedType: testType,
			Reconciler: ReconcileFunc(func(ctx context.Context, req Request) error {
				<-ctx.Done()
				time.Sleep(3 * time.Second) // cleanup after cancellation
				finished = true
				return ctx.Err()
			}),
		}
		if err := ctl.validate(); err != nil {
			t.Fatal(err)
		}
		r := newRunner(ctl, nil, discard, m)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			r.run(ctx)
			close(done)
		}()
		r.queue.Add(req("a"))
		synctest.Wait()
		start := time.Now()
		cancel()
		<-done
		if !finished {
			t.Fatal("run returned before the reconcile in flight had returned")
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("stop took %s, want the 3s the reconcile needed", d)
		}
		if got := testutil.ToFloat64(m.retries.WithLabelValues("test")); got != 0 {
			t.Errorf("retries = %v, want 0: a reconcile cut short by the end of the term is not retried", got)
		}
	})
}

// A mapper that panics drops its event and leaves the informer's goroutine,
// and so the server, running: the next event is mapped as usual.
func TestRunnerRecoversMapperPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCalls()
		r, _ := startRunner(t, Controller{Reconciler: ReconcileFunc(func(_ context.Context, rq Request) error {
			c.record(rq.ID.GetName())
			return nil
		})})
		w := Watch{Type: testType, Map: func(ev Event, _ Lookup) []Request {
			if ev.Resource.GetId().GetName() == "bad" {
				panic("index not declared")
			}
			return []Request{{ID: ev.Resource.GetId()}}
		}}
		event := func(name string) Event {
			return Event{Resource: &pbresource.Resource{Id: req(name).ID}}
		}
		if got := r.mapEvent(w, event("bad")); got != nil {
			t.Fatalf("a panicking mapper returned %v; want nothing", got)
		}
		r.enqueue(r.mapEvent(w, event("good")))
		synctest.Wait()
		if got := len(c.times("good")); got != 1 {
			t.Fatalf("the event after the panic was reconciled %d times; want 1", got)
		}
		if got := len(c.times("bad")); got != 0 {
			t.Fatalf("the panicking event was reconciled %d times; want 0", got)
		}
	})
}
