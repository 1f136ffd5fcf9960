package leaves

import (
	mrand "math/rand/v2"
	"time"

	"trellis.dev/trellis/internal/ca"
)

// Schedule is what the decision of when to sign a leaf needs to know of
// it. The zero Schedule is a leaf not signed yet.
type Schedule struct {
	// Signed: the cache holds a leaf (NotBefore to NotAfter, signed under
	// the active root RootID).
	Signed              bool
	NotBefore, NotAfter time.Time
	RootID              string
	// RenewAt is when it is renewed (ca.LeafRenewAt, drawn at signing).
	RenewAt time.Time
	// ResignAt, when set, is when it is signed again because the active
	// root changed (OnRootChange).
	ResignAt time.Time
	// RetryAt, when set, is the earliest time the next attempt may be made
	// after a failure (RetryDelay); Failures counts those in a row.
	RetryAt  time.Time
	Failures int
}

// Signed returns the schedule of a leaf just signed under the active root
// rootID: renewed at ca.LeafRenewAt(notBefore, notAfter, r).
func Signed(notBefore, notAfter time.Time, rootID string, r float64) Schedule {
	return Schedule{
		Signed: true, NotBefore: notBefore, NotAfter: notAfter, RootID: rootID,
		RenewAt: ca.LeafRenewAt(notBefore, notAfter, r),
	}
}

// NextSignAt is when the leaf should be signed next: at once (the zero
// time) when it has none; else the earlier of its renewal and its
// re-signing for a new root; never before RetryAt.
func NextSignAt(s Schedule) time.Time {
	var at time.Time
	if s.Signed {
		at = s.RenewAt
		if !s.ResignAt.IsZero() && s.ResignAt.Before(at) {
			at = s.ResignAt
		}
	}
	if s.RetryAt.After(at) {
		at = s.RetryAt
	}
	return at
}

// Due reports whether the leaf should be signed at now.
func Due(s Schedule, now time.Time) bool { return !NextSignAt(s).After(now) }

// OnRootChange is s after the servers reported activeRoot as the active
// root at now: a leaf signed under another root is re-signed
// ca.ResignDelay(window, r) from now, unless a re-signing is already
// planned. A leaf of the active root, or none, is left as it is (so is one
// whose root the servers have not named yet: activeRoot "").
func OnRootChange(s Schedule, activeRoot string, now time.Time, window time.Duration, r float64) Schedule {
	if !s.Signed || activeRoot == "" || s.RootID == activeRoot || !s.ResignAt.IsZero() {
		return s
	}
	s.ResignAt = now.Add(ca.ResignDelay(window, r))
	return s
}

// Backoff bounds of RetryDelay.
const (
	RetryMin = time.Second
	RetryMax = 2 * time.Minute
)

// RetryDelay is how long to wait after the failures-th failure in a row
// (from 1): an exponential backoff from RetryMin to RetryMax, jittered
// into [½, 1] of it by r, and never less than retryAfter, what a server
// over its signing limit asked for.
func RetryDelay(failures int, retryAfter time.Duration, r float64) time.Duration {
	d := RetryMin
	for i := 1; i < failures && d < RetryMax; i++ {
		d *= 2
	}
	d = min(d, RetryMax)
	d = d/2 + time.Duration(float64(d/2)*clamp01(r))
	return max(d, retryAfter)
}

// Failed is s after an attempt to sign failed at now.
func Failed(s Schedule, now time.Time, retryAfter time.Duration, r float64) Schedule {
	s.Failures++
	s.RetryAt = now.Add(RetryDelay(s.Failures, retryAfter, r))
	return s
}

func clamp01(r float64) float64 {
	switch {
	case r != r || r < 0:
		return 0
	case r > 1:
		return 1
	}
	return r
}

func mrandFloat() float64 { return mrand.Float64() }
