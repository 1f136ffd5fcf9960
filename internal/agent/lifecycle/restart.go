package lifecycle

import "time"

// nextRestart decides whether a container that exited at now restarts, and
// when. history holds when earlier restarts were decided; the restart is
// allowed when fewer than Attempts of them fall within the last Interval
// (all of them count when Interval is zero). It returns the history to
// keep (pruned to the window, the new restart added) and the time the
// restart is due: now + Delay ± Jitter·Delay, drawn from r in [0, 1).
func (p RestartPolicy) nextRestart(history []time.Time, now time.Time, r float64) (kept []time.Time, at time.Time, ok bool) {
	for _, t := range history {
		if p.Interval <= 0 || t.After(now.Add(-p.Interval)) {
			kept = append(kept, t)
		}
	}
	if len(kept) >= p.Attempts {
		return kept, time.Time{}, false
	}
	return append(kept, now), now.Add(p.delay(r)), true
}

// delay is Delay scaled by a factor in [1-Jitter, 1+Jitter) chosen by r.
func (p RestartPolicy) delay(r float64) time.Duration {
	j := min(max(p.Jitter, 0), 1)
	r = min(max(r, 0), 1)
	d := time.Duration(float64(p.Delay) * (1 + j*(2*r-1)))
	return max(d, 0)
}
