package inmem

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// BenchmarkStoredBytes reports the live heap one stored resource costs,
// its own messages included: resources shaped like peerbench's memory load
// (a 256-byte value, a ULID-sized uid, a short name), applied in batches of
// 1,000 as the Raft FSM does. The figure is per resource of 100,000.
func BenchmarkStoredBytes(b *testing.B) {
	const n, batch = 100_000, 1000
	typ := &pbresource.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}
	data, err := anypb.New(wrapperspb.String(strings.Repeat("x", 256)))
	if err != nil {
		b.Fatal(err)
	}
	tenancy := &pbresource.Tenancy{}
	for range b.N {
		before := liveHeap()
		batches := make([][]*pbresource.Resource, n/batch)
		for i := range batches {
			batches[i] = make([]*pbresource.Resource, batch)
			for j := range batch {
				d := &anypb.Any{TypeUrl: data.TypeUrl, Value: append([]byte(nil), data.Value...)}
				batches[i][j] = &pbresource.Resource{
					Id: &pbresource.ID{
						Type:    typ,
						Tenancy: tenancy,
						Name:    fmt.Sprintf("rss-%d-%d", i, j),
						Uid:     fmt.Sprintf("01JD%022d", i*batch+j),
					},
					Data:       d,
					Generation: 1,
				}
			}
		}
		s := NewStore()
		for i, rs := range batches {
			if _, err := s.ApplyBatch(uint64(i+1), rs); err != nil {
				b.Fatal(err)
			}
		}
		batches = nil
		after := liveHeap()
		runtime.KeepAlive(s)
		b.ReportMetric(float64(int64(after)-int64(before))/n, "B/resource")
	}
}

// BenchmarkApplyBatch1000 applies batches of 1,000 new resources, as the
// Raft FSM does for WriteBatch, into a store that already holds some.
func BenchmarkApplyBatch1000(b *testing.B) {
	const batch = 1000
	typ := &pbresource.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}
	data, err := anypb.New(wrapperspb.String(strings.Repeat("x", 256)))
	if err != nil {
		b.Fatal(err)
	}
	s := NewStore()
	next := 0
	build := func() []*pbresource.Resource {
		rs := make([]*pbresource.Resource, batch)
		for j := range rs {
			rs[j] = &pbresource.Resource{
				Id:   &pbresource.ID{Type: typ, Tenancy: &pbresource.Tenancy{}, Name: fmt.Sprintf("r-%d-%d", next, j), Uid: "01JD0000000000000000000000"},
				Data: data,
			}
		}
		next++
		return rs
	}
	for range 10 {
		if _, err := s.ApplyBatch(uint64(next+1), build()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		rs := build()
		b.StartTimer()
		if _, err := s.ApplyBatch(uint64(next), rs); err != nil {
			b.Fatal(err)
		}
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
