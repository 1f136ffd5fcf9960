package raft

import (
	"errors"
	"time"

	"trellis.dev/trellis/internal/backoff"
)

// Why pollUntil ended, when cond did not come to hold.
var (
	errPollDeadline = errors.New("deadline passed")
	errPollDone     = errors.New("done")
)

// pollUntil checks cond at growing intervals (1 ms to 50 ms) until it
// holds (nil), deadline fires (errPollDeadline), done is closed
// (errPollDone) or the backend stops (ErrShutdown). A nil channel never
// fires. Raft has no notification for its applied index, and these waits
// are rare (a lagging or restarted server), so polling costs nothing.
func (b *Backend) pollUntil(cond func() bool, deadline <-chan time.Time, done <-chan struct{}) error {
	poll := backoff.Waiter{Policy: backoff.Poll}
	for !cond() {
		t := time.NewTimer(poll.Next())
		select {
		case <-t.C:
		case <-deadline:
			t.Stop()
			return errPollDeadline
		case <-done:
			t.Stop()
			return errPollDone
		case <-b.stop:
			t.Stop()
			return ErrShutdown
		}
	}
	return nil
}
