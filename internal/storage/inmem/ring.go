package inmem

import (
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// eventRing keeps the most recent events for resuming watches, bounded in
// number and in the bytes of the resources they keep alive: an event holds
// its resource, and after an update that is an old version nothing else
// holds. A count alone would let a run of large resources (up to 1 MiB
// each) keep gigabytes.
type eventRing struct {
	buf   []*pbresource.WatchEvent
	start int // position of the oldest event
	n     int
	// bytes is the estimated size of the kept events' resources; the
	// oldest events go once it passes maxBytes (the newest always stays).
	bytes, maxBytes int
	// evicted is the highest index no longer fully covered by buf: a watch
	// may resume after index i only when i >= evicted.
	evicted uint64
}

func newEventRing(size, maxBytes int) eventRing {
	if size < 1 {
		size = 1
	}
	return eventRing{buf: make([]*pbresource.WatchEvent, size), maxBytes: maxBytes}
}

func (r *eventRing) add(ev *pbresource.WatchEvent) {
	size := resourceBytes(ev.GetResource())
	for r.n > 0 && (r.n == len(r.buf) || r.bytes+size > r.maxBytes) {
		r.evictOldest()
	}
	r.buf[(r.start+r.n)%len(r.buf)] = ev
	r.n++
	r.bytes += size
}

func (r *eventRing) evictOldest() {
	old := r.buf[r.start]
	r.evicted = old.GetIndex()
	r.bytes -= resourceBytes(old.GetResource())
	r.buf[r.start] = nil
	r.start = (r.start + 1) % len(r.buf)
	r.n--
}

// since returns the kept events after idx, oldest first, or false when some
// of them are gone. Events of one batch share an index, so an index is
// covered only once every event at it is still kept.
func (r *eventRing) since(idx uint64) ([]*pbresource.WatchEvent, bool) {
	if idx < r.evicted {
		return nil, false
	}
	var out []*pbresource.WatchEvent
	for i := 0; i < r.n; i++ {
		ev := r.buf[(r.start+i)%len(r.buf)]
		if ev.GetIndex() > idx {
			out = append(out, ev)
		}
	}
	return out, true
}

func (r *eventRing) reset(idx uint64) {
	clear(r.buf)
	r.start, r.n, r.bytes, r.evicted = 0, 0, 0, idx
}

// resourceBytes estimates the memory a resource holds: its messages and
// the bytes of its variable-length fields. It is cheap (no encoding) and
// depends on the resource alone, so the ring can subtract exactly what it
// added.
func resourceBytes(res *pbresource.Resource) int {
	if res == nil {
		return 0
	}
	const (
		messages = 512 // resource, id, data and their fixed fields
		entry    = 48  // a map entry, a condition's own fields
	)
	id := res.GetId()
	n := messages + len(id.GetName()) + len(id.GetUid()) + len(res.GetData().GetValue())
	for k, v := range res.GetMetadata() {
		n += entry + len(k) + len(v)
	}
	for k, st := range res.GetStatus() {
		n += entry + len(k) + len(st.GetData().GetValue())
		for _, c := range st.GetConditions() {
			n += entry + len(c.GetType()) + len(c.GetReason()) + len(c.GetMessage())
		}
	}
	return n
}
