package resource_test

import (
	"fmt"
	"strings"
	"testing"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// The benchmarks measure the service's own cost over the in-memory
// backend: validation, hooks, reads, planning and copies, with a 256-byte
// payload as in the benchmarks.

var payload = strings.Repeat("p", 256)

// BenchmarkWrite creates a new resource on every iteration.
func BenchmarkWrite(b *testing.B) {
	h := newHarness(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(b, "", fmt.Sprintf("w-%d", i), payload)}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkWriteUpdate updates one resource on every iteration.
func BenchmarkWriteUpdate(b *testing.B) {
	h := newHarness(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: widget(b, "", "w", fmt.Sprintf("%s-%d", payload, i))}); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkWriteBatch1000 creates 1,000 resources in one batch per
// iteration and reports resources per second.
func BenchmarkWriteBatch1000(b *testing.B) {
	h := newHarness(b)
	b.ReportAllocs()
	round := 0
	var n int
	for b.Loop() {
		b.StopTimer()
		members := make([]*pbresource.Resource, 1000)
		for j := range members {
			members[j] = widget(b, "", fmt.Sprintf("r%d-%d", round, j), payload)
		}
		b.StartTimer()
		if _, err := h.svc.WriteBatch(h.ctx, &pbresource.WriteBatchRequest{Resources: members}); err != nil {
			b.Fatal(err)
		}
		round++
		n += len(members)
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "resources/s")
}
