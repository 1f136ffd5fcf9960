package raft

import (
	"sync"
)

// leadership tells subscribers when this server becomes the leader (after
// it has caught its state up, so controllers start on a complete store) and
// when it stops being one.
type leadership struct {
	mu        sync.Mutex
	announced bool // the last value published
	// readyTerm is the term in which this server, as leader, has applied
	// everything committed before it (0: not ready). Strong reads are
	// served locally only in that term.
	readyTerm uint64
	subs      map[*leaderSub]struct{}
	stop      chan struct{}
	closed    bool
}

func newLeadership() *leadership {
	return &leadership{subs: map[*leaderSub]struct{}{}, stop: make(chan struct{})}
}

// subscribe returns a channel that first yields the current state and then
// every change. It is closed when the backend shuts down.
func (l *leadership) subscribe() <-chan bool {
	s := &leaderSub{ch: make(chan bool, 1), wake: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		close(s.ch)
		return s.ch
	}
	s.q.push(l.announced)
	l.subs[s] = struct{}{}
	go s.run(l.stop)
	return s.ch
}

// announce marks this server a caught-up leader in term, unless the
// session that calls it was ended meanwhile (stillLeader reports false).
func (l *leadership) announce(term uint64, stillLeader func() bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || !stillLeader() {
		return false
	}
	l.readyTerm = term
	l.publish(true)
	return true
}

// stepDown marks this server a follower.
func (l *leadership) stepDown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.readyTerm = 0
	l.publish(false)
}

// readyIn reports whether this server is a caught-up leader in term.
func (l *leadership) readyIn(term uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.readyTerm != 0 && l.readyTerm == term
}

// publish hands v to every subscriber. Called with l.mu held.
func (l *leadership) publish(v bool) {
	if l.announced == v {
		return
	}
	l.announced = v
	for s := range l.subs {
		s.mu.Lock()
		s.q.push(v)
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// close ends every subscription.
func (l *leadership) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	l.readyTerm = 0
	close(l.stop)
}

// leaderSub delivers one subscriber's values from its queue.
type leaderSub struct {
	ch   chan bool
	wake chan struct{}
	mu   sync.Mutex
	q    leaderQueue
}

func (s *leaderSub) run(stop <-chan struct{}) {
	defer close(s.ch)
	for {
		s.mu.Lock()
		v, ok := s.q.pop()
		s.mu.Unlock()
		if !ok {
			select {
			case <-s.wake:
				continue
			case <-stop:
				return
			}
		}
		select {
		case s.ch <- v:
		case <-stop:
			return
		}
	}
}

// leaderQueue holds the leadership values a subscriber has not received
// yet, without letting a slow subscriber make it grow: values alternate,
// and true,false,true after a delivered false (or the reverse) collapses to
// its first value, since the subscriber only needs to learn that the state
// left what it last saw and where it ended. A subscriber that saw true and
// is late always gets false before it may get true again, so it never
// misses a lost leadership.
type leaderQueue struct {
	pending []bool
	last    bool
	hasLast bool
}

func (q *leaderQueue) push(v bool) {
	tail, hasTail := q.last, q.hasLast
	if n := len(q.pending); n > 0 {
		tail, hasTail = q.pending[n-1], true
	}
	if hasTail && tail == v {
		return
	}
	q.pending = append(q.pending, v)
	if len(q.pending) == 3 {
		q.pending = q.pending[:1]
	}
}

func (q *leaderQueue) pop() (bool, bool) {
	if len(q.pending) == 0 {
		return false, false
	}
	v := q.pending[0]
	q.pending = q.pending[1:]
	q.last, q.hasLast = v, true
	return v, true
}
