package proxycomp

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/proxy/snapshot"
)

// served is one mesh task the component serves: its socket's server and
// its current snapshot.
type served struct {
	c        *Component
	task     component.Task
	interest interest

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	wake   chan struct{} // a followed type changed: compute again

	// listening is closed once the socket listens, or could not
	// (listenErr).
	listening chan struct{}
	listenErr error

	mu       sync.Mutex
	snap     *pbproxy.Snapshot
	changed  chan struct{} // closed and replaced at each new snapshot
	lastErr  string        // the last compute error logged
	srv      *grpc.Server
	stopOnce sync.Once
}

func newServed(c *Component, t component.Task) *served {
	ctx, cancel := context.WithCancel(c.ctx)
	return &served{
		c: c, task: t, interest: interestOf(t), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), wake: make(chan struct{}, 1),
		listening: make(chan struct{}), changed: make(chan struct{}),
	}
}

func (s *served) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// stop ends the task's loop and its server (its streams with it).
func (s *served) stop() {
	s.stopOnce.Do(func() {
		s.cancel()
		<-s.listening
		<-s.done
		s.mu.Lock()
		srv := s.srv
		s.mu.Unlock()
		if srv != nil {
			srv.Stop()
		}
	})
}

// run listens on the task's socket, then computes the task's snapshot at
// each change of its inputs until the task is stopped.
func (s *served) run() {
	defer close(s.done)
	srv, err := s.listen()
	s.listenErr = err
	close(s.listening)
	if err != nil {
		s.c.log.Error("cannot serve the task's proxy", "task", s.task.ID.GetName(), "err", err)
		return
	}
	s.mu.Lock()
	s.srv = srv
	s.mu.Unlock()
	for {
		var leafChanged <-chan struct{}
		if lv := s.c.d.Leaves; lv != nil {
			leafChanged = lv.Changed()
		}
		s.update()
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		case <-leafChanged:
		}
	}
}

// update computes the snapshot and publishes it when its version is new.
func (s *served) update() {
	in, err := gather(s.ctx, s.c.d, s.task)
	var snap *pbproxy.Snapshot
	if err == nil {
		snap, err = snapshot.Compute(in)
	}
	if err != nil {
		if s.ctx.Err() != nil || errors.Is(err, errNotSynced) {
			return
		}
		s.mu.Lock()
		repeated := s.lastErr == err.Error()
		s.lastErr = err.Error()
		s.mu.Unlock()
		if !repeated {
			s.c.log.Warn("the task's proxy snapshot cannot be made; its proxy keeps the last one", "task", s.task.ID.GetName(), "err", err)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = ""
	if s.snap.GetVersion() == snap.GetVersion() {
		return
	}
	s.snap = snap
	close(s.changed)
	s.changed = make(chan struct{})
}

// current is the current snapshot (nil before the first) and a channel
// closed at the next.
func (s *served) current() (*pbproxy.Snapshot, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap, s.changed
}
