package controller_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage/inmem"
)

// The benchmarks model the orchestrator's daemon case: n instances, one
// environment, one task of it on each instance, as the agents report them.
var (
	benchTaskType = &pbresource.Type{Group: "bench", GroupVersion: "v1", Kind: "Task"}
	benchEnvType  = &pbresource.Type{Group: "bench", GroupVersion: "v1", Kind: "Environment"}
)

var benchByInstance = &controller.Index{Name: "instance", Keys: func(o *controller.Object) []string {
	if t, ok := controller.Decoded[*pborch.Task](o); ok && t.GetInstance() != "" {
		return []string{t.GetInstance()}
	}
	return nil
}}

func benchTask(b *testing.B, i int, version uint64) *pbresource.Resource {
	b.Helper()
	data, err := anypb.New(&pborch.Task{
		TaskDefinition: "web:3", Instance: fmt.Sprintf("instance-%05d", i), StartedBy: "deployment/0f8fad5b-d9cb-469f-a165-70867728950e",
		DesiredStatus: "RUNNING", Environment: "web", EnvironmentVersion: "0f8fad5b-d9cb-469f-a165-70867728950e",
		CreatedAt: timestamppb.Now(),
	})
	if err != nil {
		b.Fatal(err)
	}
	// What the agent reports rides along in the status, as stored.
	report, err := anypb.New(&pborch.TaskStatus{
		LastStatus: "RUNNING", Health: "HEALTHY", Session: "5f0c6e1e2b7d4c2a", StartedAt: timestamppb.Now(), ReportedAt: timestamppb.Now(),
		Containers: []*pborch.ContainerState{{Name: "app", Status: "RUNNING", Health: "HEALTHY"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return &pbresource.Resource{
		Id:      &pbresource.ID{Type: benchTaskType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: fmt.Sprintf("web-%05d", i), Uid: fmt.Sprintf("uid-%05d", i)},
		Owner:   &pbresource.ID{Type: benchEnvType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "web", Uid: "env-uid"},
		Version: fmt.Sprint(version),
		Data:    data,
		Status:  map[string]*pbresource.Status{"agent": {Data: report}},
	}
}

func benchCache(b *testing.B, n int) *controller.Cache {
	b.Helper()
	c := controller.NewCache()
	if err := c.Declare(controller.CachedType{Type: benchTaskType, Indexes: []*controller.Index{benchByInstance}}); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		c.Apply(controller.Event{Resource: benchTask(b, i, uint64(i+1))})
	}
	return c
}

// BenchmarkCacheMemory reports what the cache holds per task (the
// resource, its decoded data, the owner and instance indexes), beside
// what the resources alone take.
func BenchmarkCacheMemory(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			for range b.N {
				res := make([]*pbresource.Resource, n)
				before := heapInUse()
				for i := range res {
					res[i] = benchTask(b, i, uint64(i+1))
				}
				alone := heapInUse() - before
				c := controller.NewCache()
				if err := c.Declare(controller.CachedType{Type: benchTaskType, Indexes: []*controller.Index{benchByInstance}}); err != nil {
					b.Fatal(err)
				}
				before = heapInUse()
				for _, r := range res {
					c.Apply(controller.Event{Resource: r})
				}
				cached := heapInUse() - before
				b.ReportMetric(float64(alone)/float64(n), "resource-B/task")
				b.ReportMetric(float64(cached)/float64(n), "cache-B/task")
				runtime.KeepAlive(res)
				runtime.KeepAlive(c)
			}
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkCacheLookup finds the tasks on one instance three ways: the
// cache's index, a scan of the cache, and what a controller does without
// it, a List from the store and a decode of each task.
func BenchmarkCacheLookup(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		c := benchCache(b, n)
		want := fmt.Sprintf("instance-%05d", n/2)
		b.Run(fmt.Sprintf("tasks=%d/by-index", n), func(b *testing.B) {
			for range b.N {
				if got := c.ByIndex(benchTaskType, "instance", want); len(got) != 1 {
					b.Fatalf("found %d", len(got))
				}
			}
		})
		b.Run(fmt.Sprintf("tasks=%d/cache-scan", n), func(b *testing.B) {
			for range b.N {
				found := 0
				for _, o := range c.List(benchTaskType) {
					if t, _ := controller.Decoded[*pborch.Task](o); t.GetInstance() == want {
						found++
					}
				}
				if found != 1 {
					b.Fatalf("found %d", found)
				}
			}
		})
		b.Run(fmt.Sprintf("tasks=%d/store-list-decode", n), func(b *testing.B) {
			svc := benchStore(b, n)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				resp, err := svc.List(ctx, &pbresource.ListRequest{Type: benchTaskType, Tenancy: &pbresource.Tenancy{Namespace: ids.WildcardNamespace}})
				if err != nil {
					b.Fatal(err)
				}
				found := 0
				for _, res := range resp.GetResources() {
					t, err := resource.DecodeData[*pborch.Task](res)
					if err == nil && t.GetInstance() == want {
						found++
					}
				}
				if found != 1 {
					b.Fatalf("found %d", found)
				}
			}
		})
	}
}

// BenchmarkCacheApply is the cost on the watch's path of one task report:
// decoding it and refiling it in both indexes.
func BenchmarkCacheApply(b *testing.B) {
	const n = 5000
	c := benchCache(b, n)
	reports := make([]*pbresource.Resource, n)
	for i := range reports {
		reports[i] = benchTask(b, i, uint64(n+i+1))
	}
	b.ResetTimer()
	for i := range b.N {
		c.Apply(controller.Event{Resource: report(reports[i%n], 2*n+i)})
	}
}

// benchStore is the resource service over the in-memory backend, holding
// the n tasks.
func benchStore(b *testing.B, n int) *resource.Service {
	b.Helper()
	reg := resource.NewRegistry()
	reg.Register(resource.Registration{Type: benchEnvType, Proto: &pborch.Task{}, Scope: resource.ScopeNamespace})
	reg.Register(resource.Registration{Type: benchTaskType, Proto: &pborch.Task{}, Scope: resource.ScopeNamespace})
	svc := resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: reg})
	ctx := context.Background()
	const batch = 500
	for start := 0; start < n; start += batch {
		var rs []*pbresource.Resource
		for i := start; i < min(start+batch, n); i++ {
			r := benchTask(b, i, 0)
			r.Id.Uid, r.Version, r.Owner = "", "", nil
			rs = append(rs, r)
		}
		if _, err := svc.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: rs}); err != nil {
			b.Fatal(err)
		}
	}
	return svc
}

// BenchmarkCacheReadAfterReport is a scheduler's run after each report:
// one task of the environment changes in place, then all 5,000 of them
// are read by owner (one pass over the kept order, no sort).
func BenchmarkCacheReadAfterReport(b *testing.B) {
	const n = 5000
	c := benchCache(b, n)
	owner := controller.OwnerKey(&pbresource.ID{Type: benchEnvType, Tenancy: &pbresource.Tenancy{Namespace: "default"}, Name: "web"})
	reports := make([]*pbresource.Resource, n)
	for i := range reports {
		reports[i] = benchTask(b, i, uint64(n+i+1))
	}
	b.ResetTimer()
	for i := range b.N {
		c.Apply(controller.Event{Resource: report(reports[i%n], 2*n+i)})
		if got := c.ByIndex(benchTaskType, controller.IndexOwner, owner); len(got) != n {
			b.Fatalf("found %d", len(got))
		}
	}
}

// report is r at a newer version: a new resource, as the watch hands on
// (a cached one is never modified), sharing r's id and data.
func report(r *pbresource.Resource, version int) *pbresource.Resource {
	return &pbresource.Resource{Id: r.GetId(), Owner: r.GetOwner(), Data: r.GetData(), Version: fmt.Sprint(version)}
}
