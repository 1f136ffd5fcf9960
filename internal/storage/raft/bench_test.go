package raft

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage/inmem"
)

// BenchmarkWrite measures creates of 256-byte resources on a durable
// 3-server cluster over loopback, through the leader and through a
// follower, with 1, 16 and 64 concurrent writers.
func BenchmarkWrite(b *testing.B) {
	for _, via := range []string{"leader", "follower"} {
		for _, writers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("via=%s/writers=%d", via, writers), func(b *testing.B) {
				nodes := startCluster(b, 3, true, DefaultTuning())
				target := leaderOf(b, nodes)
				if via == "follower" {
					target = followersOf(nodes, target)[0]
				}
				payload := string(make([]byte, 256))
				var next atomic.Int64
				ctx := ctxT(b)
				b.ResetTimer()
				var wg sync.WaitGroup
				for range writers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							res := &pbresource.Resource{Id: testID(fmt.Sprint("r", i)), Metadata: map[string]string{"p": payload}}
							if _, err := target.b.WriteCAS(ctx, res); err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			})
		}
	}
}

// BenchmarkWriteBatch1000 writes batches of 1,000 created resources with
// 256-byte data on a durable 3-server cluster, through the leader and
// through a follower, and reports resources per second. Its allocations
// are the whole cluster's: every server decodes and applies each batch.
func BenchmarkWriteBatch1000(b *testing.B) {
	for _, via := range []string{"leader", "follower"} {
		b.Run("via="+via, func(b *testing.B) {
			nodes := startCluster(b, 3, true, DefaultTuning())
			target := leaderOf(b, nodes)
			if via == "follower" {
				target = followersOf(nodes, target)[0]
			}
			data := &anypb.Any{TypeUrl: "type.googleapis.com/trellis.core.v1.Namespace", Value: make([]byte, 256)}
			ctx := ctxT(b)
			b.ReportAllocs()
			round := 0
			for b.Loop() {
				b.StopTimer()
				batch := make([]*pbresource.Resource, 1000)
				for i := range batch {
					id := testID(fmt.Sprintf("r%d-%d", round, i))
					batch[i] = &pbresource.Resource{Id: id, Generation: 1, Data: data}
				}
				round++
				b.StartTimer()
				if _, err := target.b.WriteBatch(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(round*1000)/b.Elapsed().Seconds(), "resources/s")
		})
	}
}

// BenchmarkFSMSnapshotRestore snapshots and restores a state of 100,000
// 256-byte resources through the FSM's streaming format.
func BenchmarkFSMSnapshotRestore(b *testing.B) {
	const n = 100_000
	f := newFSM(inmem.NewStore(), slog.New(slog.DiscardHandler), func() {})
	payload := string(make([]byte, 256))
	for i := range n {
		res := &pbresource.Resource{Id: testID(fmt.Sprintf("r%06d", i)), Metadata: map[string]string{"p": payload}}
		if _, err := f.store.WriteCAS(uint64(i+1), res); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		snap, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		var sink memSink
		if err := snap.Persist(&sink); err != nil {
			b.Fatal(err)
		}
		snap.Release()
		b.ReportMetric(float64(sink.Len())/(1<<20), "MiB")
		g := newFSM(inmem.NewStore(), slog.New(slog.DiscardHandler), func() {})
		if err := g.Restore(io.NopCloser(&sink)); err != nil {
			b.Fatal(err)
		}
		if g.store.Index() != n {
			b.Fatalf("restored index %d", g.store.Index())
		}
	}
}
