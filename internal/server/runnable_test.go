package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// journal logs what runnables do, in order.
type journal struct {
	mu  sync.Mutex
	log []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.log = append(j.log, s)
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.log, " ")
}

// blocker starts (and says it is ready), waits for its context, then
// takes stopDelay to stop.
func blocker(j *journal, name string, stopDelay time.Duration) Runnable {
	ready := make(chan struct{})
	return readyRunnable{RunnableFunc(func(ctx context.Context) error {
		j.add("start:" + name)
		close(ready)
		<-ctx.Done()
		time.Sleep(stopDelay)
		j.add("stop:" + name)
		return nil
	}), ready}
}

type readyRunnable struct {
	Runnable
	ready chan struct{}
}

func (r readyRunnable) Ready() <-chan struct{} { return r.ready }

func TestGroupStartsInOrderStopsInReverse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &journal{}
		g := NewGroup(time.Minute, nil)
		// b is slow to come up: c must not start before b is ready.
		bReady := make(chan struct{})
		g.Add("a", blocker(j, "a", 0))
		g.Add("b", readyRunnable{RunnableFunc(func(ctx context.Context) error {
			j.add("start:b")
			time.Sleep(time.Second)
			j.add("ready:b")
			close(bReady)
			<-ctx.Done()
			j.add("stop:b")
			return nil
		}), bReady})
		g.Add("c", blocker(j, "c", time.Second))

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- g.Start(ctx) }()
		synctest.Wait()
		if got := j.String(); got != "start:a start:b" {
			t.Fatalf("before b is ready: %s", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := j.String(); got != "start:a start:b ready:b start:c" {
			t.Fatalf("started: %s", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := j.String(); got != "start:a start:b ready:b start:c stop:c stop:b stop:a" {
			t.Fatalf("stopped: %s", got)
		}
	})
}

func TestGroupFailureStopsTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &journal{}
		g := NewGroup(time.Minute, nil)
		boom := errors.New("boom")
		g.Add("a", blocker(j, "a", 0))
		g.Add("b", RunnableFunc(func(ctx context.Context) error {
			time.Sleep(time.Second)
			return boom
		}))
		g.Add("c", blocker(j, "c", 0))
		err := g.Start(context.Background())
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "b: boom") {
			t.Fatalf("Start = %v", err)
		}
		if got := j.String(); got != "start:a start:c stop:c stop:a" {
			t.Fatalf("journal: %s", got)
		}
	})
}

func TestGroupPanicIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGroup(time.Minute, nil)
		g.Add("p", RunnableFunc(func(context.Context) error { panic("bug") }))
		if err := g.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "p panicked: bug") {
			t.Fatalf("Start = %v", err)
		}
	})
}

func TestGroupFailureWhileWaitingForReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &journal{}
		g := NewGroup(time.Minute, nil)
		g.Add("a", readyRunnable{RunnableFunc(func(context.Context) error { return errors.New("no port") }), make(chan struct{})})
		g.Add("b", blocker(j, "b", 0))
		if err := g.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "a: no port") {
			t.Fatalf("Start = %v", err)
		}
		if j.String() != "" {
			t.Fatalf("b started after a failed: %s", j)
		}
	})
}

func TestGroupShutdownTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &journal{}
		g := NewGroup(10*time.Second, nil)
		g.Add("a", blocker(j, "a", 0))
		release := make(chan struct{})
		g.Add("stuck", RunnableFunc(func(ctx context.Context) error {
			<-ctx.Done()
			<-release // does not stop before the test ends
			return nil
		}))
		g.Add("c", blocker(j, "c", 3*time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		start := time.Now()
		go func() { done <- g.Start(ctx) }()
		synctest.Wait()
		cancel()
		err := <-done
		// Past the deadline the rest are cancelled and not waited for.
		if !errors.Is(err, ErrShutdownTimeout) || !strings.Contains(err.Error(), "still running: [stuck a]") {
			t.Fatalf("Start = %v", err)
		}
		if took := time.Since(start); took != 10*time.Second {
			t.Fatalf("shutdown took %v, want the 10s timeout", took)
		}
		// a was cancelled at the deadline and stopped at once.
		synctest.Wait()
		close(release)
		if got := j.String(); got != "start:a start:c stop:c stop:a" {
			t.Fatalf("journal: %s", got)
		}
	})
}

func TestGroupEarlyCleanEndKeepsRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &journal{}
		g := NewGroup(time.Minute, nil)
		g.Add("oneshot", RunnableFunc(func(context.Context) error { j.add("oneshot"); return nil }))
		g.Add("b", blocker(j, "b", 0))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- g.Start(ctx) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("group ended when a runnable ended cleanly: %v", err)
		default:
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := j.String(); !strings.HasSuffix(got, "stop:b") {
			t.Fatalf("journal: %s", got)
		}
	})
}
