package ca

import "time"

// When a holder of leaves signs them: the agents' leaf cache for its
// leaves, each server for its own server leaf. Pure decisions over plain
// values, time given as an argument.

// DefaultResignWindow is the default window over which the leaves of a
// holder are signed again after the active root changed (ResignDelay).
const DefaultResignWindow = 30 * time.Second

// LeafSchedule is what the decision of when to sign a leaf needs to know
// of it. The zero LeafSchedule is a leaf not signed yet.
type LeafSchedule struct {
	// Signed: the cache holds a leaf (NotBefore to NotAfter, signed under
	// the active root RootID).
	Signed              bool
	NotBefore, NotAfter time.Time
	RootID              string
	// RenewAt is when it is renewed (LeafRenewAt, drawn at signing).
	RenewAt time.Time
	// ResignAt, when set, is when it is signed again because the active
	// root changed (OnRootChange).
	ResignAt time.Time
	// RetryAt, when set, is the earliest time the next attempt may be made
	// after a failure (SignRetryDelay); Failures counts those in a row.
	RetryAt  time.Time
	Failures int
}

// LeafSigned returns the schedule of a leaf just signed under the active
// root rootID: renewed at LeafRenewAt(notBefore, notAfter, r).
func LeafSigned(notBefore, notAfter time.Time, rootID string, r float64) LeafSchedule {
	return LeafSchedule{
		Signed: true, NotBefore: notBefore, NotAfter: notAfter, RootID: rootID,
		RenewAt: LeafRenewAt(notBefore, notAfter, r),
	}
}

// NextSignAt is when the leaf should be signed next: at once (the zero
// time) when it has none; else the earlier of its renewal and its
// re-signing for a new root; never before RetryAt.
func NextSignAt(s LeafSchedule) time.Time {
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

// SignDue reports whether the leaf should be signed at now.
func SignDue(s LeafSchedule, now time.Time) bool { return !NextSignAt(s).After(now) }

// OnRootChange is s after the servers reported activeRoot as the active
// root at now: a leaf signed under another root is re-signed
// ResignDelay(window, r) from now, unless a re-signing is already
// planned. A leaf of the active root, or none, is left as it is (so is one
// whose root the servers have not named yet: activeRoot "").
func OnRootChange(s LeafSchedule, activeRoot string, now time.Time, window time.Duration, r float64) LeafSchedule {
	if !s.Signed || activeRoot == "" || s.RootID == activeRoot || !s.ResignAt.IsZero() {
		return s
	}
	s.ResignAt = now.Add(ResignDelay(window, r))
	return s
}

// Backoff bounds of SignRetryDelay.
const (
	SignRetryMin = time.Second
	SignRetryMax = 2 * time.Minute
)

// SignRetryDelay is how long to wait after the failures-th failure in a
// row (from 1): an exponential backoff from SignRetryMin to SignRetryMax,
// jittered into [½, 1] of it by r, and never less than retryAfter, what a
// server over its signing limit asked for.
func SignRetryDelay(failures int, retryAfter time.Duration, r float64) time.Duration {
	d := SignRetryMin
	for i := 1; i < failures && d < SignRetryMax; i++ {
		d *= 2
	}
	d = min(d, SignRetryMax)
	d = d/2 + time.Duration(float64(d/2)*clamp01(r))
	return max(d, retryAfter)
}

// SignFailed is s after an attempt to sign failed at now.
func SignFailed(s LeafSchedule, now time.Time, retryAfter time.Duration, r float64) LeafSchedule {
	s.Failures++
	s.RetryAt = now.Add(SignRetryDelay(s.Failures, retryAfter, r))
	return s
}
