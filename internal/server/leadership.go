package server

import (
	"context"
	"sync"

	"trellis.dev/trellis/internal/storage"
)

// leadershipHub fans one storage.Leadership out to many listeners (the
// controller manager, the bootstrap, the heartbeat tracker). A backend's
// LeaderCh is a single channel: two readers would each see only some of its
// values.
type leadershipHub struct {
	src storage.Leadership

	mu      sync.Mutex
	known   bool
	current bool
	subs    []chan bool
}

func newLeadershipHub(src storage.Leadership) *leadershipHub {
	return &leadershipHub{src: src}
}

// subBuffer holds a listener's unread transitions; when it is full the
// listener is behind, and its backlog is replaced by the current state.
const subBuffer = 8

// Subscribe returns a Leadership whose channel yields the current state
// (once known) and then every change.
func (h *leadershipHub) Subscribe() storage.Leadership {
	ch := make(chan bool, subBuffer)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.known {
		ch <- h.current
	}
	h.subs = append(h.subs, ch)
	return leaderChan(ch)
}

// Start forwards the source's values until ctx ends.
func (h *leadershipHub) Start(ctx context.Context) error {
	src := h.src.LeaderCh()
	for {
		select {
		case <-ctx.Done():
			return nil
		case v, ok := <-src:
			if !ok {
				<-ctx.Done()
				return nil
			}
			h.publish(v)
		}
	}
}

func (h *leadershipHub) publish(v bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.known, h.current = true, v
	for _, ch := range h.subs {
		select {
		case ch <- v:
		default:
			// Behind: drop the backlog, keep the latest state.
		drain:
			for {
				select {
				case <-ch:
				default:
					break drain
				}
			}
			ch <- v
		}
	}
}

type leaderChan chan bool

func (c leaderChan) LeaderCh() <-chan bool { return c }
