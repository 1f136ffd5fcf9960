package inmem

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
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
	typ, data := namespacePayload(b)
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
	typ, data := namespacePayload(b)
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

// namespacePayload is the type and the 256-byte data of the benchmarks'
// resources.
func namespacePayload(b *testing.B) (*pbresource.Type, *anypb.Any) {
	b.Helper()
	data, err := anypb.New(wrapperspb.String(strings.Repeat("x", 256)))
	if err != nil {
		b.Fatal(err)
	}
	return &pbresource.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}, data
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkApplyUpdates applies CAS updates of 256-byte resources, picked
// at random among 64,000 stored ones, as the Raft FSM does under 64
// concurrent writers: one change per transaction (ApplyCAS), or a group of
// them in one (Update), as raft hands the FSM the entries committed
// together.
func BenchmarkApplyUpdates(b *testing.B) {
	const stored = 64_000
	typ, data := namespacePayload(b)
	id := func(i int) *pbresource.ID {
		return &pbresource.ID{Type: typ, Tenancy: &pbresource.Tenancy{}, Name: fmt.Sprintf("w%d-%d", i%64, i/64), Uid: "01JD0000000000000000000000"}
	}
	for _, group := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			s := NewStore()
			initial := make([]*pbresource.Resource, stored)
			for i := range initial {
				initial[i] = &pbresource.Resource{Id: id(i), Data: data}
			}
			if _, err := s.ApplyBatch(1, initial); err != nil {
				b.Fatal(err)
			}
			idx := uint64(1)
			versions := make([]string, stored)
			for i := range versions {
				versions[i] = "1"
			}
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			writes := 0
			for b.Loop() {
				b.StopTimer()
				changes := make([]*pbresource.Resource, group)
				picked := make([]int, group)
				for j := range changes {
					// Distinct names, so every update succeeds.
					for picked[j] = rng.IntN(stored); slices.Contains(picked[:j], picked[j]); picked[j] = rng.IntN(stored) {
					}
					changes[j] = &pbresource.Resource{Id: id(picked[j]), Version: versions[picked[j]], Data: data}
				}
				b.StartTimer()
				if group == 1 {
					idx++
					if _, err := s.ApplyCAS(idx, changes[0]); err != nil {
						b.Fatal(err)
					}
				} else {
					s.Update(func(tx *Tx) {
						for _, c := range changes {
							idx++
							if _, err := tx.WriteCAS(idx, c); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
				b.StopTimer()
				for j, p := range picked {
					versions[p] = changes[j].GetVersion()
				}
				writes += group
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(writes), "ns/write")
		})
	}
}
