package controller

import "time"

// Delay returns how long to wait before the run that follows the failures-th
// consecutive failure (failures >= 1): the ceiling Base·2^(failures-1),
// capped at Max, scaled by a jitter factor in [1/2, 1) drawn from r, which
// is in [0, 1). It is a pure function so that its bounds are tested by
// tables.
func (b Backoff) Delay(failures int, r float64) time.Duration {
	ceiling := b.ceiling(failures)
	if r < 0 {
		r = 0
	}
	if r >= 1 {
		r = 0.999999
	}
	half := ceiling / 2
	return half + time.Duration(float64(ceiling-half)*r)
}

// ceiling is the un-jittered delay after failures consecutive failures.
func (b Backoff) ceiling(failures int) time.Duration {
	if failures < 1 {
		failures = 1
	}
	d := b.Base
	for i := 1; i < failures; i++ {
		if d >= b.Max/2 {
			return b.Max
		}
		d *= 2
	}
	return min(d, b.Max)
}
