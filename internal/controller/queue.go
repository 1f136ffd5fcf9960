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
//   - Pace holds a request's next run until a pause has passed (the
//     controller's Pacing): an add meanwhile waits for the pause's end
//     instead of running, and is still queued once. Pacing holds no
//     AddAfter back for longer than the pause, nor cancels one.
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
	// notBefore is, per request, when the pause Pace set ends; held are
	// the requests added during a pause, each with the timer that adds it
	// at the pause's end.
	notBefore map[key]time.Time
	held      map[key]*time.Timer
	// pruneAt is the size of notBefore at which ended pauses are dropped,
	// so that requests never added again do not pile up.
	pruneAt  int
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

		notBefore: make(map[key]time.Time),
		held:      make(map[key]*time.Timer),
		pruneAt:   minPrune,
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
	if !q.running[k] {
		if wait := q.pausedLocked(k); wait > 0 {
			q.holdLocked(k, req, wait)
			return
		}
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
	if wait := q.pausedLocked(k); wait > 0 {
		held := q.reqs[k]
		delete(q.dirty, k)
		delete(q.reqs, k)
		q.holdLocked(k, held, wait)
		return
	}
	q.ready = append(q.ready, k)
	q.depthChanged()
	q.cond.Signal()
}

// minPrune is the least size of notBefore at which ended pauses are
// dropped.
const minPrune = 64

// Pace holds the next run of req until d from now (not at all when d <= 0).
// The runner calls it at the end of a run, before Done.
func (q *queue) Pace(req Request, d time.Duration) {
	k := keyOf(req.ID)
	q.mu.Lock()
	defer q.mu.Unlock()
	if d <= 0 {
		delete(q.notBefore, k)
		return
	}
	now := time.Now()
	q.notBefore[k] = now.Add(d)
	if len(q.notBefore) >= q.pruneAt {
		for k, until := range q.notBefore {
			if !until.After(now) {
				delete(q.notBefore, k)
			}
		}
		q.pruneAt = max(minPrune, 2*len(q.notBefore))
	}
}

// pausedLocked is how long the pause Pace set for k still lasts; zero
// when it is over, or there is none.
func (q *queue) pausedLocked(k key) time.Duration {
	until, ok := q.notBefore[k]
	if !ok {
		return 0
	}
	if wait := time.Until(until); wait > 0 {
		return wait
	}
	delete(q.notBefore, k)
	return 0
}

// holdLocked adds req once its pause of d is over; a request held
// already stays held, as one.
func (q *queue) holdLocked(k key, req Request, d time.Duration) {
	if _, ok := q.held[k]; ok {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.held[k] != t {
			return // stopped by ShutDown
		}
		delete(q.held, k)
		q.addLocked(k, req)
	})
	q.held[k] = t
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
	for k, t := range q.held {
		t.Stop()
		delete(q.held, k)
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
