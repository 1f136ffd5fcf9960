package server

import (
	"context"
	"testing"
	"testing/synctest"
)

type srcLeadership chan bool

func (c srcLeadership) LeaderCh() <-chan bool { return c }

func TestLeadershipHubFansOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := make(srcLeadership)
		h := newLeadershipHub(src)
		early := h.Subscribe().LeaderCh()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go h.Start(ctx)

		src <- true
		synctest.Wait()
		if v := <-early; !v {
			t.Fatal("early subscriber: want true")
		}
		// A late subscriber gets the current state first.
		late := h.Subscribe().LeaderCh()
		if v := <-late; !v {
			t.Fatal("late subscriber: want the current true")
		}
		src <- false
		src <- true
		synctest.Wait()
		for name, ch := range map[string]<-chan bool{"early": early, "late": late} {
			if a, b := <-ch, <-ch; a || !b {
				t.Fatalf("%s: got %v %v, want false true", name, a, b)
			}
		}
	})
}

func TestLeadershipHubSlowSubscriberGetsLatest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := make(srcLeadership)
		h := newLeadershipHub(src)
		slow := h.Subscribe().LeaderCh()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go h.Start(ctx)
		// More transitions than the buffer holds, never read: the hub must
		// not block, and the backlog collapses to the latest state.
		for i := range 3 * subBuffer {
			src <- i%2 == 0
		}
		src <- false
		synctest.Wait()
		var last bool
		n := 0
		for len(slow) > 0 {
			last = <-slow
			n++
		}
		if n == 0 || n > subBuffer || last {
			t.Fatalf("read %d values, last %v; want at most %d ending in false", n, last, subBuffer)
		}
	})
}
