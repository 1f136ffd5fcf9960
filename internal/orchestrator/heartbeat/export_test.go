package heartbeat

import "time"

// Stall adds d to the time the tracker's process could not run, as its
// stall meter would after a tick d late.
func (t *Tracker) Stall(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stalls.total += d
}
