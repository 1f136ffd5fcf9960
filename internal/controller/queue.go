package controller

import (
	"math/rand/v2"
	"sync"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// key is a Request as a comparable value.
type key struct {
	group, version, kind, namespace, name, uid string
}

func keyOf(id *pbresource.ID) key {
	return key{
		group:     id.GetType().GetGroup(),
		version:   id.GetType().GetGroupVersion(),
		kind:      id.GetType().GetKind(),
		namespace: id.GetTenancy().GetNamespace(),
		name:      id.GetName(),
		uid:       id.GetUid(),
	}
}

// queue is a controller's work queue. Its rules:
//
//   - A request added while it is queued and not yet running is queued once
//     (dedupe).
//   - A request added while it runs is queued again when the run is Done,
//     never handed to a second worker meanwhile: one request never runs
//     concurrently with itself.
//   - AddAfter queues a request once a delay has passed; of several delays
//     pending for one request the earliest wins.
//   - Retry counts a failure and queues the request after the backoff for
//     that many consecutive failures; Forget resets the count.
//
// Delays use the time package's timers, which testing/synctest fakes.
type queue struct {
	backoff Backoff
	rand    func() float64
	// onDepth, when set, is told the number of ready requests whenever it
	// changes (the queue depth metric). Called with mu held.
	onDepth func(int)

	mu       sync.Mutex
	cond     *sync.Cond
	ready    []key
	reqs     map[key]Request // the request of every key in dirty or running
	dirty    map[key]bool    // to be run: in ready, or waiting for its run to end
	running  map[key]bool
	timers   map[key]*delayed
	failures map[key]int
	shutdown bool
}

type delayed struct {
	timer *time.Timer
	at    time.Time
}

func newQueue(b Backoff) *queue {
	q := &queue{
		backoff:  b,
		rand:     rand.Float64,
		reqs:     make(map[key]Request),
		dirty:    make(map[key]bool),
		running:  make(map[key]bool),
		timers:   make(map[key]*delayed),
		failures: make(map[key]int),
	}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// Add queues req to run as soon as a worker is free.
func (q *queue) Add(req Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.addLocked(keyOf(req.ID), req)
}

func (q *queue) addLocked(k key, req Request) {
	if q.shutdown || q.dirty[k] {
		return
	}
	q.dirty[k] = true
	q.reqs[k] = req
	if q.running[k] {
		return // queued again by Done
	}
	q.ready = append(q.ready, k)
	q.depthChanged()
	q.cond.Signal()
}

// AddAfter queues req once d has passed (at once when d <= 0).
func (q *queue) AddAfter(req Request, d time.Duration) {
	if d <= 0 {
		q.Add(req)
		return
	}
	k := keyOf(req.ID)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	at := time.Now().Add(d)
	if old, ok := q.timers[k]; ok {
		if !old.at.After(at) {
			return
		}
		old.timer.Stop()
	}
	entry := &delayed{at: at}
	entry.timer = time.AfterFunc(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.timers[k] != entry {
			return // replaced or stopped meanwhile
		}
		delete(q.timers, k)
		q.addLocked(k, req)
	})
	q.timers[k] = entry
}

// Retry counts a failure of req and queues it after the backoff for its
// consecutive failures. It returns that delay.
func (q *queue) Retry(req Request) time.Duration {
	k := keyOf(req.ID)
	q.mu.Lock()
	q.failures[k]++
	d := q.backoff.Delay(q.failures[k], q.rand())
	q.mu.Unlock()
	q.AddAfter(req, d)
	return d
}

// Forget resets the failure count of req.
func (q *queue) Forget(req Request) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.failures, keyOf(req.ID))
}

// Failures returns the consecutive failures counted for req.
func (q *queue) Failures(req Request) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.failures[keyOf(req.ID)]
}

// Get waits for a ready request and marks it running. It returns false once
// the queue is shut down.
func (q *queue) Get() (Request, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ready) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if q.shutdown {
		return Request{}, false
	}
	k := q.ready[0]
	q.ready[0] = key{}
	q.ready = q.ready[1:]
	delete(q.dirty, k)
	q.running[k] = true
	q.depthChanged()
	return q.reqs[k], true
}

// Done ends the run of req that Get handed out; if req was added during the
// run, it is ready again.
func (q *queue) Done(req Request) {
	k := keyOf(req.ID)
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.running, k)
	if !q.dirty[k] {
		delete(q.reqs, k)
		return
	}
	if q.shutdown {
		return
	}
	q.ready = append(q.ready, k)
	q.depthChanged()
	q.cond.Signal()
}

// Len returns the number of ready requests.
func (q *queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ready)
}

// ShutDown drops every queued and delayed request and wakes the workers
// waiting in Get. Runs in progress end normally (their Done is harmless).
func (q *queue) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	for k, d := range q.timers {
		d.timer.Stop()
		delete(q.timers, k)
	}
	q.ready = nil
	q.depthChanged()
	q.cond.Broadcast()
}

func (q *queue) depthChanged() {
	if q.onDepth != nil {
		q.onDepth(len(q.ready))
	}
}
