package main

import (
	"fmt"
	"slices"
	"time"
	"trellis.dev/trellis/bench/internal/report"
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
	return fmt.Sprintf("%9.0f ops/s  p50 %7s  p99 %7s  errors %d", r.throughput(), report.Round(r.p50), report.Round(r.p99), r.errors)
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
