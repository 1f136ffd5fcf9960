package ca

import (
	"time"

	"trellis.dev/trellis/internal/resource"
)

// RootState is what the pruning decision needs to know of a root.
type RootState struct {
	ID           string
	Active       bool
	RotatedOutAt time.Time // zero while active, or when unknown
	NotAfter     time.Time
	// LeafTTL is the longest leaf TTL in force while the root was active
	// (CARoot.max_leaf_ttl); zero when unknown. The longer of it and the
	// leafTTL the decisions are given is the one that counts.
	LeafTTL time.Duration
}

// RootsToPrune returns, in the order given, the ids of the roots that can
// be removed at now: a root that is not active once 2 × leafTTL has
// passed since it was rotated out (the last leaf it signed expired a
// leafTTL after that at the latest; the second leafTTL is a margin for
// peers still holding old bundles), or once it has expired. The active
// root is never pruned, whatever its dates.
//
// leafTTL is the leaf TTL in force now; a root's own LeafTTL, the longest
// in force while it signed, counts when it is longer, so that lowering the
// leaf TTL never prunes a root before a leaf it signed has expired. With
// neither above zero a root is pruned by expiry alone: without a known
// lifetime of leaves, only expiry proves none is still valid.
func RootsToPrune(roots []RootState, leafTTL time.Duration, now time.Time) []string {
	var out []string
	for _, r := range roots {
		if r.Active {
			continue
		}
		ttl := max(leafTTL, r.LeafTTL)
		expired := !r.NotAfter.IsZero() && !now.Before(r.NotAfter)
		drained := ttl > 0 && !r.RotatedOutAt.IsZero() && !now.Before(r.RotatedOutAt.Add(2*ttl))
		if expired || drained {
			out = append(out, r.ID)
		}
	}
	return out
}

// RenewAt is when a certificate valid from notBefore to notAfter should be
// renewed: at half its life, the rule for intermediates, which leaves the
// other half to retry in if the primary or the provider is unreachable.
func RenewAt(notBefore, notAfter time.Time) time.Time {
	if !notAfter.After(notBefore) {
		return notBefore
	}
	return notBefore.Add(notAfter.Sub(notBefore) / 2)
}

// LeafRenewAt is when an agent renews a leaf valid from notBefore to
// notAfter: at 60 % of its life plus r × 30 %, for r drawn uniformly from
// [0, 1), so the leaves a fleet got at one moment are not all renewed at
// the next same moment. r is clamped into [0, 1].
func LeafRenewAt(notBefore, notAfter time.Time, r float64) time.Time {
	if !notAfter.After(notBefore) {
		return notBefore
	}
	life := notAfter.Sub(notBefore)
	// Whole-number fractions keep the bounds exact: 0.6 + 0.3 is not 0.9
	// in floating point.
	from, span := life/10*6+life%10*6/10, life/10*3+life%10*3/10
	return notBefore.Add(from + time.Duration(float64(span)*clamp01(r)))
}

// ResignDelay is how long an agent waits, after it sees the active root
// change, before it signs its leaves again: r × window, for r drawn
// uniformly from [0, 1), so that a fleet spreads its signatures over the
// window instead of asking in the same second. r is clamped into [0, 1].
func ResignDelay(window time.Duration, r float64) time.Duration {
	if window <= 0 {
		return 0
	}
	return time.Duration(float64(window) * clamp01(r))
}

// CheckLeafTTL refuses, naming leaf_ttl, a leaf TTL under MinLeafTTL or
// one that would outlive the active root, which expires at rootNotAfter:
// such leaves would stop verifying long before the date they show.
func CheckLeafTTL(leafTTL time.Duration, rootNotAfter, now time.Time) error {
	if leafTTL < MinLeafTTL {
		return resource.NewFieldError("leaf_ttl", "%v is under the minimum of %v", leafTTL, MinLeafTTL)
	}
	if left := rootNotAfter.Sub(now); leafTTL > left {
		return resource.NewFieldError("leaf_ttl", "%v outlives the active root, which expires at %s (in %v)",
			leafTTL, rootNotAfter.UTC().Format(time.RFC3339), left.Truncate(time.Second))
	}
	return nil
}

func clamp01(r float64) float64 {
	switch {
	case r != r || r < 0: // NaN counts as 0
		return 0
	case r > 1:
		return 1
	}
	return r
}

// NextPruneAt is the earliest time after now at which RootsToPrune, with
// the same roots and leafTTL, will name a root it does not name at now;
// the zero time when none will. The CA manager asks to run again then. A
// root already due at now is left out: it is pruned now.
func NextPruneAt(roots []RootState, leafTTL time.Duration, now time.Time) time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, r := range roots {
		if r.Active || len(RootsToPrune([]RootState{r}, leafTTL, now)) > 0 {
			continue
		}
		consider(r.NotAfter)
		if ttl := max(leafTTL, r.LeafTTL); ttl > 0 && !r.RotatedOutAt.IsZero() {
			consider(r.RotatedOutAt.Add(2 * ttl))
		}
	}
	return next
}
