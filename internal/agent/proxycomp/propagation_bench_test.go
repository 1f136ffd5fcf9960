package proxycomp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbproxy "trellis.dev/trellis/api/proxy/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/leaves"
	"trellis.dev/trellis/internal/agent/proxycomp"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/server"
)

// BenchmarkIntentionPropagation: an intention change, written through the
// servers' API, until each of N proxies (in-process consumers of the real
// ProxyService streams of one agent's proxy component, each on its own
// task's socket) holds a snapshot with it. It reports the p50 and p99 of
// the time until the last consumer has it (the bound: p99 ≤
// 500 ms for 1,000 proxies, over several agents).
func BenchmarkIntentionPropagation(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("proxies=%d", n), func(b *testing.B) { benchPropagation(b, n) })
	}
}

func benchPropagation(b *testing.B, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	srv := startServer(b, ctx, log)

	// The agent's parts the component uses: its link to the servers, its
	// leaf cache and its informer.
	link := leaves.NewServers([]string{srv.GRPCAddr()}, log, grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer link.Close()
	cache, err := leaves.New(leaves.Config{Signer: link, Datacenter: "dc1", Instance: "i-1"})
	if err != nil {
		b.Fatal(err)
	}
	if err := cache.SetServices([]leaves.Key{leaves.ServiceKey("default", "dash")}); err != nil {
		b.Fatal(err)
	}
	inf, err := informer.New(informer.Config{Source: link, Rand: rand.Float64})
	if err != nil {
		b.Fatal(err)
	}
	comp, err := proxycomp.New(component.Deps{Instance: "i-1", Datacenter: "dc1", Informer: inf, Leaves: cache, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, run := range []func(){
		func() { link.WatchRoots(ctx, cache.SetRoots) },
		func() { cache.Run(ctx) },
		func() { _ = inf.Start(ctx) },
		func() { _ = comp.Start(ctx) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}

	// n tasks of service dash, each with its socket and its proxy.
	def := &pborch.TaskDefinition{Family: "dash", Revision: 1, Mesh: &pborch.TaskMesh{Port: 9002, Protocol: "http"}}
	dir := b.TempDir()
	seen := make([]chan string, n) // each consumer's intention actions, in order
	for i := range n {
		id := orchestrator.TaskID("default", fmt.Sprintf("dash-%d", i))
		id.Uid = fmt.Sprintf("u%d", i)
		t := component.Task{ID: id, Definition: def, Dir: filepath.Join(dir, fmt.Sprint(i))}
		if err := mkdir(t.Dir); err != nil {
			b.Fatal(err)
		}
		if err := comp.Prestart(ctx, t); err != nil {
			b.Fatal(err)
		}
		seen[i] = make(chan string, 1024)
		stream := watch(b, ctx, proxycomp.SocketPath(t.Dir), id.GetName())
		go func() {
			for {
				s, err := stream.Recv()
				if err != nil {
					return
				}
				action := "none"
				if src := s.GetInbound().GetIntentions().GetSources(); len(src) > 0 {
					action = src[0].GetAction()
				}
				seen[i] <- action
			}
		}()
	}
	waitAll := func(action string) {
		for _, ch := range seen {
			for got := range ch {
				if got == action {
					break
				}
			}
		}
	}
	base := "http://" + srv.HTTPAddr()
	put(b, base, "allow")
	waitAll("allow")

	var took []time.Duration
	b.ResetTimer()
	for i := range b.N {
		action := []string{"deny", "allow"}[i%2]
		start := time.Now()
		put(b, base, action)
		waitAll(action)
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "p99-ms")
}

func startServer(b *testing.B, ctx context.Context, log *slog.Logger) *server.Server {
	b.Helper()
	mods, err := server.DefaultModulesWith("-dns-addr", "")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0",
		Modules: mods, Logger: log, ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	b.Cleanup(func() { <-done })
	c, err := client.New("http://" + srv.HTTPAddr())
	if err != nil {
		b.Fatal(err)
	}
	for c.Health(ctx) != nil {
		time.Sleep(10 * time.Millisecond)
	}
	return srv
}

func watch(b *testing.B, ctx context.Context, path, task string) grpc.ServerStreamingClient[pbproxy.Snapshot] {
	b.Helper()
	cc, err := grpc.NewClient("passthrough:///proxy", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return proxycomp.DialUnix(ctx, path) }))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	stream, err := pbproxy.NewProxyServiceClient(cc).Watch(ctx, &pbproxy.WatchRequest{Task: task}, grpc.WaitForReady(true))
	if err != nil {
		b.Fatal(err)
	}
	return stream
}

// put writes the intentions of dash: web gets action.
func put(b *testing.B, base, action string) {
	b.Helper()
	body, _ := json.Marshal(map[string]any{"data": map[string]any{"sources": []any{map[string]any{"name": "web", "action": action}}}})
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/intentions/dash", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("PUT /v1/intentions/dash = %s", resp.Status)
	}
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o700) }
