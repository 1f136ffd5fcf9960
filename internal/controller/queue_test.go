package controller

import (
	"testing"
	"testing/synctest"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

var testType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Thing"}

func req(name string) Request {
	return Request{ID: &pbresource.ID{Type: testType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: name}}
}

func mustGet(t *testing.T, q *queue) Request {
	t.Helper()
	r, ok := q.Get()
	if !ok {
		t.Fatal("Get: queue shut down")
	}
	return r
}

// getAsync starts a Get and returns the channel its result arrives on.
func getAsync(q *queue) <-chan Request {
	ch := make(chan Request, 1)
	go func() {
		if r, ok := q.Get(); ok {
			ch <- r
		}
		close(ch)
	}()
	return ch
}

func TestQueueDedupesQueuedRequests(t *testing.T) {
	q := newQueue(Backoff{Base: time.Second, Max: time.Minute})
	q.Add(req("a"))
	q.Add(req("b"))
	q.Add(req("a"))
	q.Add(req("a"))
	if n := q.Len(); n != 2 {
		t.Fatalf("Len = %d after adding a, b, a, a; want 2", n)
	}
	if got := mustGet(t, q).ID.GetName(); got != "a" {
		t.Errorf("first Get = %s, want a (FIFO)", got)
	}
	if got := mustGet(t, q).ID.GetName(); got != "b" {
		t.Errorf("second Get = %s, want b", got)
	}
	if n := q.Len(); n != 0 {
		t.Errorf("Len = %d after both were taken, want 0", n)
	}
}

func TestQueueUIDIsPartOfTheKey(t *testing.T) {
	q := newQueue(Backoff{Base: time.Second, Max: time.Minute})
	a1, a2 := req("a"), req("a")
	a1.ID.Uid, a2.ID.Uid = "01", "02"
	q.Add(a1)
	q.Add(a2)
	q.Add(req("a"))
	if n := q.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3: two incarnations and the name-only request are distinct", n)
	}
}

func TestQueueRequestAddedWhileRunningRunsOnceAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(Backoff{Base: time.Second, Max: time.Minute})
		q.Add(req("a"))
		running := mustGet(t, q)

		// Changes during the run: queued, but not handed to another worker.
		q.Add(req("a"))
		q.Add(req("a"))
		second := getAsync(q)
		third := getAsync(q)
		synctest.Wait()
		select {
		case r := <-second:
			t.Fatalf("%s handed out while it was running", r)
		case r := <-third:
			t.Fatalf("%s handed out while it was running", r)
		default:
		}

		q.Done(running)
		synctest.Wait()
		var got []Request
		for _, ch := range []<-chan Request{second, third} {
			select {
			case r := <-ch:
				got = append(got, r)
			default:
			}
		}
		if len(got) != 1 || got[0].ID.GetName() != "a" {
			t.Fatalf("after Done, got %v; want exactly one run of a", got)
		}
		q.Done(got[0])
		synctest.Wait()
		if n := q.Len(); n != 0 {
			t.Errorf("Len = %d, want 0: the second run absorbed every change", n)
		}
		q.ShutDown()
	})
}

func TestQueueDoneWithoutChangeForgetsRequest(t *testing.T) {
	q := newQueue(Backoff{Base: time.Second, Max: time.Minute})
	q.Add(req("a"))
	r := mustGet(t, q)
	q.Done(r)
	if n := q.Len(); n != 0 {
		t.Fatalf("Len = %d, want 0", n)
	}
	if len(q.reqs) != 0 || len(q.running) != 0 || len(q.dirty) != 0 {
		t.Errorf("bookkeeping left behind: reqs %d running %d dirty %d", len(q.reqs), len(q.running), len(q.dirty))
	}
}

func TestQueueAddAfterTiming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(Backoff{Base: time.Second, Max: time.Minute})
		start := time.Now()
		q.AddAfter(req("late"), 5*time.Second)
		q.AddAfter(req("early"), 2*time.Second)
		q.AddAfter(req("now"), 0)

		cases := []struct {
			name string
			at   time.Duration
		}{{"now", 0}, {"early", 2 * time.Second}, {"late", 5 * time.Second}}
		for _, c := range cases {
			r := mustGet(t, q)
			if r.ID.GetName() != c.name || time.Since(start) != c.at {
				t.Errorf("got %s at %s, want %s at %s", r.ID.GetName(), time.Since(start), c.name, c.at)
			}
			q.Done(r)
		}
	})
}

func TestQueueAddAfterEarliestWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(Backoff{Base: time.Second, Max: time.Minute})
		start := time.Now()
		q.AddAfter(req("a"), 10*time.Second)
		q.AddAfter(req("a"), 3*time.Second)
		q.AddAfter(req("a"), 7*time.Second)
		r := mustGet(t, q)
		if at := time.Since(start); at != 3*time.Second {
			t.Errorf("ran at %s, want 3s", at)
		}
		q.Done(r)

		again := getAsync(q)
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case r := <-again:
			t.Errorf("%s ran again at %s; the later delays were superseded", r, time.Since(start))
		default:
		}
		q.ShutDown()
	})
}

func TestQueueAddBeforeDelayRunsNowAndLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(Backoff{Base: time.Second, Max: time.Minute})
		start := time.Now()
		q.AddAfter(req("a"), 5*time.Second)
		q.Add(req("a"))
		r := mustGet(t, q)
		if at := time.Since(start); at != 0 {
			t.Errorf("first run at %s, want at once", at)
		}
		q.Done(r)
		r = mustGet(t, q)
		if at := time.Since(start); at != 5*time.Second {
			t.Errorf("second run at %s, want 5s (the requested later run still happens)", at)
		}
		q.Done(r)
	})
}

func TestQueueRetryBackoffGrowsCapsAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base, maxDelay := 100*time.Millisecond, time.Second
		q := newQueue(Backoff{Base: base, Max: maxDelay})
		q.rand = func() float64 { return 0 } // the lowest draw: half the ceiling

		want := []time.Duration{50, 100, 200, 400, 500, 500}
		for i, w := range want {
			w *= time.Millisecond
			start := time.Now()
			if d := q.Retry(req("a")); d != w {
				t.Errorf("retry %d: Retry returned %s, want %s", i+1, d, w)
			}
			r := mustGet(t, q)
			if at := time.Since(start); at != w {
				t.Errorf("retry %d ran after %s, want %s", i+1, at, w)
			}
			q.Done(r)
		}
		if n := q.Failures(req("a")); n != len(want) {
			t.Errorf("Failures = %d, want %d", n, len(want))
		}

		q.Forget(req("a"))
		start := time.Now()
		q.Retry(req("a"))
		q.Done(mustGet(t, q))
		if at := time.Since(start); at != base/2 {
			t.Errorf("after Forget the retry ran after %s, want %s (backoff reset)", at, base/2)
		}
	})
}

func TestQueueRetryJitterWithinBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := Backoff{Base: time.Second, Max: time.Hour}
		q := newQueue(b)
		draws := []float64{0.1, 0.9, 0.5, 0.0, 0.99}
		q.rand = func() float64 {
			r := draws[0]
			draws = draws[1:]
			return r
		}
		for failures := 1; failures <= 5; failures++ {
			start := time.Now()
			q.Retry(req("a"))
			q.Done(mustGet(t, q))
			at := time.Since(start)
			if c := b.Ceiling(failures); at < c/2 || at >= c {
				t.Errorf("failure %d: ran after %s, outside [%s, %s)", failures, at, c/2, c)
			}
		}
	})
}

func TestQueueShutDownWakesWorkersAndDropsDelays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(Backoff{Base: time.Second, Max: time.Minute})
		waiting := getAsync(q)
		q.AddAfter(req("a"), time.Second)
		synctest.Wait()
		q.ShutDown()
		if _, ok := <-waiting; ok {
			t.Fatal("Get returned a request after ShutDown")
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		q.Add(req("b"))
		if n := q.Len(); n != 0 {
			t.Errorf("Len = %d after ShutDown, want 0", n)
		}
		if _, ok := q.Get(); ok {
			t.Error("Get succeeded after ShutDown")
		}
	})
}
