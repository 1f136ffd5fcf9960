package informer_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"trellis.dev/trellis/internal/informer"
)

// BenchmarkChangeSeenBy1000Subscribers: one write, seen by 1,000
// consumers of one informer over a server's own store, each with a queue
// and a goroutine of its own (as a blocking query or a stream to a proxy
// would be): the time from the write's start until the last consumer has
// the delta. Its p99 is the informer's share of the budget (a
// check's change seen by 1,000 watchers on the servers in 100 ms at p99).
func BenchmarkChangeSeenBy1000Subscribers(b *testing.B) {
	const n = 1000
	h := newHarness(b, b, true)
	h.start()
	seen := make(chan time.Time, n)
	for range n {
		queue := make(chan informer.Delta, 64)
		sub, err := h.in.Subscribe(itemType, func(d informer.Delta) {
			select {
			case queue <- d:
			default: // a consumer that falls behind starts over; none does here
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for d := range queue {
				if d.Op == informer.Changed {
					seen <- time.Now()
				}
			}
		}()
		b.Cleanup(func() { sub.Cancel(); close(queue) })
	}
	h.put("x", "g1")
	h.caughtUp()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		h.put("x", "g"+strconv.Itoa(i)) // a write that changes nothing is not stored
		var last time.Time
		for range n {
			if t := <-seen; t.After(last) {
				last = t
			}
		}
		lat = append(lat, last.Sub(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
