package catalogmodule

import (
	"context"
	"testing"
	"time"
)

// waitersOf is how many of wait's callers wait on service key now.
func (s *serviceChanges) waitersOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.waits[key]; w != nil {
		return w.waiters
	}
	return 0
}

// A blocking query of one service is woken by that service's change
// alone; what it waited on is dropped once nobody waits, whether its
// service changed or its wait ended.
func TestServiceChangesWakeTheirServiceOnly(t *testing.T) {
	s := newServiceChanges()
	s.apply([]string{"default/a", "default/b"}, 4)
	done := make(chan struct{})
	go func() { defer close(done); s.wait(context.Background(), "default/a", 4) }()
	for s.waitersOf("default/a") != 1 {
		time.Sleep(time.Millisecond)
	}
	moved := s.waits["default/a"].moved

	s.apply([]string{"default/b"}, 5)
	select {
	case <-moved:
		t.Fatal("b's change woke a's waiter")
	default:
	}
	if s.of("default/a") != 4 || s.of("default/b") != 5 {
		t.Fatalf("indexes a %d, b %d; want 4, 5", s.of("default/a"), s.of("default/b"))
	}

	s.apply([]string{"default/a"}, 6)
	<-done
	if len(s.waits) != 0 {
		t.Fatalf("after a's change: %d services waited on, want none", len(s.waits))
	}

	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan struct{})
	go func() { defer close(done); s.wait(ctx, "default/unknown", 0) }()
	for s.waitersOf("default/unknown") != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if len(s.waits) != 0 || s.waiting.Load() != 0 {
		t.Fatalf("after the wait ended: %d services waited on, %d waiting; want none", len(s.waits), s.waiting.Load())
	}
}
