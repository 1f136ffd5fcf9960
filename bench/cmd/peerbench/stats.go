package main

import (
	"fmt"
	"slices"
	"time"
)

// result is what one workload cell measured.
type result struct {
	ops      int
	errors   int
	elapsed  time.Duration
	p50, p99 time.Duration
	// cpuPerOp is the servers' CPU time per operation (writes only).
	cpuPerOp time.Duration
}

func (r result) throughput() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func (r result) String() string {
	return fmt.Sprintf("%9.0f ops/s  p50 %7s  p99 %7s  errors %d", r.throughput(), round(r.p50), round(r.p99), r.errors)
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func summarize(lat []time.Duration, errors int, elapsed time.Duration) result {
	slices.Sort(lat)
	return result{ops: len(lat), errors: errors, elapsed: elapsed, p50: percentile(lat, 0.50), p99: percentile(lat, 0.99)}
}

func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
