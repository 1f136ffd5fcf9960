package server_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/server"
)

// BenchmarkChangeSeenBy1000WatchersOn3Servers: a write on the leader of
// a three-server Raft cluster (in this process), seen by 1,000 watchers
// spread over the three servers' informers, each with a queue and a
// goroutine of its own: the time from the write's start until the last
// watcher has the delta, replication included. The budget for a
// check's change seen by 1,000 watchers on 3 servers is 100 ms at p99.
func BenchmarkChangeSeenBy1000WatchersOn3Servers(b *testing.B) {
	const watchers = 1000
	informers := make([]*informer.Informer, 3)
	n := 0
	servers, _ := raftClusterStops(b, 0, nil, func(cfg *server.Config) {
		cfg.Modules = append(server.DefaultModules(), informerProbe{in: &informers[n]})
		n++
	})
	leader := leaderOf(b, servers)
	seen := make(chan time.Time, watchers)
	for i := range watchers {
		queue := make(chan informer.Delta, 64)
		sub, err := informers[i%len(informers)].Subscribe(probeItemType, func(d informer.Delta) {
			select {
			case queue <- d:
			default:
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
	ctx := context.Background()
	write := func(value string) {
		data, _ := anypb.New(wrapperspb.String(value))
		if _, err := leader.API().Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
			Id:   &pbresource.ID{Type: probeItemType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "check"},
			Data: data,
		}}); err != nil {
			b.Fatal(err)
		}
	}
	write("start")
	for _, in := range informers {
		if _, err := in.WaitConsistent(ctx, probeItemType); err != nil {
			b.Fatal(err)
		}
	}
	lat := make([]time.Duration, 0, b.N)
	writes := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		write(strconv.Itoa(i))
		writes = append(writes, time.Since(start))
		var last time.Time
		for range watchers {
			if t := <-seen; t.After(last) {
				last = t
			}
		}
		lat = append(lat, last.Sub(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(writes)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	// The write alone (its commit by a quorum, fsync included): what of
	// the above the informers do not decide.
	b.ReportMetric(float64(writes[len(writes)/2].Microseconds())/1000, "write-p50-ms")
	b.ReportMetric(float64(writes[len(writes)*99/100].Microseconds())/1000, "write-p99-ms")
}
