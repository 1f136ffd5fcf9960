// Command writecpu measures what writes cost a Trellis cluster in CPU
// rather than in wall time: it starts a cluster, writes atomic batches and
// then single writes through gRPC, and reports the CPU-seconds the server
// processes spent per resource written (user + system, from /proc). On a
// machine shared with other work, throughput moves with the load; the CPU
// a write costs does not, so this is the figure to compare binaries by.
//
//	go run ./cmd/writecpu -trellis ../bin/trellis -servers 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/testcluster"
)

func main() {
	bin := flag.String("trellis", "bin/trellis", "the trellis binary to measure")
	servers := flag.Int("servers", 3, "cluster size")
	batches := flag.Int("batches", 30, "batches of 1,000 resources to write")
	writes := flag.Int("writes", 6000, "single writes to make")
	writers := flag.Int("writers", 64, "concurrent single writers")
	profile := flag.String("profile", "", "write a CPU profile of each server to this prefix (+ member name)")
	profilePhase := flag.String("profile-phase", "batch", "what to profile: batch or writes")
	flag.Parse()

	ctx := context.Background()
	dir, err := os.MkdirTemp("", "writecpu-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var extra []string
	if *profile != "" {
		extra = append(extra, "-enable-debug")
	}
	tc, err := testcluster.Start(ctx, testcluster.Options{Bin: *bin, Dir: dir, Servers: *servers, Extra: extra})
	if err != nil {
		log.Fatal(err)
	}
	defer tc.Stop()

	var conns []*grpc.ClientConn
	for _, m := range tc.Members {
		conn, err := grpc.NewClient(m.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			log.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
	}
	payload := strings.Repeat("v", 256)
	data, err := anypb.New(&pbcore.Namespace{Description: payload})
	if err != nil {
		log.Fatal(err)
	}
	res := func(name string, data *anypb.Any) *pbresource.Resource {
		return &pbresource.Resource{Id: &pbresource.ID{Type: &pbresource.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}, Name: name, Tenancy: &pbresource.Tenancy{}}, Data: data}
	}

	// Batches, one at a time, through the first member.
	cli := pbresource.NewResourceServiceClient(conns[0])
	var profiles sync.WaitGroup
	allocProfiles := func(phase, suffix string) {
		if *profile == "" || *profilePhase != phase {
			return
		}
		for _, m := range tc.Members {
			fetch(m, "allocs", *profile+m.Name+".allocs."+suffix)
		}
	}
	startProfiles := func(phase string) {
		allocProfiles(phase, "before")
		if *profile == "" || *profilePhase != phase {
			return
		}
		for _, m := range tc.Members {
			profiles.Add(1)
			go func() {
				defer profiles.Done()
				fetch(m, "profile?seconds=5", *profile+m.Name)
			}()
		}
	}
	startProfiles("batch")
	cpu0, t0, mem0 := clusterCPU(tc), time.Now(), clusterAllocs(tc)
	for b := range *batches {
		req := &pbresource.WriteBatchRequest{}
		for i := range 1000 {
			req.Resources = append(req.Resources, res(fmt.Sprintf("b%d-%d", b, i), data))
		}
		if _, err := cli.WriteBatch(ctx, req); err != nil {
			log.Fatal(err)
		}
	}
	n := float64(*batches * 1000)
	cpu, mem := clusterCPU(tc)-cpu0, clusterAllocs(tc).minus(mem0)
	profiles.Wait()
	allocProfiles("batch", "after")
	fmt.Printf("batch:  %.1f µs CPU, %.1f allocations, %.0f bytes allocated per resource (all servers); %.0f resources/s wall\n",
		cpu/n*1e6, mem.mallocs/n, mem.bytes/n, n/time.Since(t0).Seconds())

	// Single writes (updates after the first round), spread over members.
	var next atomic.Int64
	var wg sync.WaitGroup
	startProfiles("writes")
	cpu0, t0, mem0 = clusterCPU(tc), time.Now(), clusterAllocs(tc)
	for w := range *writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := pbresource.NewResourceServiceClient(conns[w%len(conns)])
			for j := 0; ; j++ {
				if next.Add(1) > int64(*writes) {
					return
				}
				// A new value every time, so that an update changes something.
				d, err := anypb.New(&pbcore.Namespace{Description: fmt.Sprintf("%d-%s", j, payload)})
				if err != nil {
					log.Fatal(err)
				}
				if _, err := c.Write(ctx, &pbresource.WriteRequest{Resource: res(fmt.Sprintf("w%d-%d", w, j%100), d)}); err != nil {
					log.Fatal(err)
				}
			}
		}()
	}
	wg.Wait()
	n = float64(*writes)
	cpu, mem = clusterCPU(tc)-cpu0, clusterAllocs(tc).minus(mem0)
	profiles.Wait()
	allocProfiles("writes", "after")
	fmt.Printf("writes: %.1f µs CPU, %.1f allocations, %.0f bytes allocated per write (all servers); %.0f writes/s wall\n",
		cpu/n*1e6, mem.mallocs/n, mem.bytes/n, n/time.Since(t0).Seconds())
}

// fetch saves one of m's pprof profiles.
func fetch(m *testcluster.Member, profile, path string) {
	resp, err := http.Get("http://" + m.HTTPAddr + "/v1/debug/pprof/" + profile)
	if err != nil {
		log.Print(err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		log.Print(err)
	}
}

// allocs are the Go heap allocations made so far.
type allocs struct{ mallocs, bytes float64 }

func (a allocs) minus(b allocs) allocs { return allocs{a.mallocs - b.mallocs, a.bytes - b.bytes} }

// clusterAllocs sums the members' heap allocations, from their metrics.
func clusterAllocs(tc *testcluster.Cluster) allocs {
	var total allocs
	for _, m := range tc.Members {
		resp, err := http.Get("http://" + m.HTTPAddr + "/v1/metrics")
		if err != nil {
			log.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			log.Fatal(err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			name, value, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			v, _ := strconv.ParseFloat(value, 64)
			switch name {
			case "go_memstats_mallocs_total":
				total.mallocs += v
			case "go_memstats_alloc_bytes_total":
				total.bytes += v
			}
		}
	}
	return total
}

// clusterCPU is the CPU-seconds the member processes have used.
func clusterCPU(tc *testcluster.Cluster) float64 {
	var total float64
	for _, m := range tc.Members {
		t, err := testcluster.CPUTime(m.PID())
		if err != nil {
			log.Fatal(err)
		}
		total += t.Seconds()
	}
	return total
}
