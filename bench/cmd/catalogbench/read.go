package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/anypb"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/catalog"
)

// batch is how many instances one WriteBatch registers.
const batch = 1000

// readResult is what a read cell measured.
type readResult struct {
	rss      []int64 // each server's (member's), in bytes
	leader   int     // the index of the leader in rss
	latency  []time.Duration
	bodySize int // of one answer, bytes
	entries  int // in one answer
}

// trellisRead registers b.instances service instances from outside
// Trellis (b.perService in each service: x, s1, s2, ...), each with an
// address, a port, two tags and two meta entries and no checks (so
// passing), reads each server's resident size after b.settle, then times
// b.reads fresh GET /v1/health/service/x?passing on a follower (each a
// new request, no index, over a kept connection), from the request's
// sending until its body is read.
func (b *bench) trellisRead(ctx context.Context) (*readResult, error) {
	cl, err := b.startCluster(ctx, filepath.Join(b.dir, "read"))
	if err != nil {
		return nil, err
	}
	defer cl.stop()
	api := cl.leaderAPI()
	services := (b.instances + b.perService - 1) / b.perService
	for s := range services {
		if err := writeService(ctx, api, serviceName(s)); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(b.progress, "catalogbench: registering %d instances\n", b.instances)
	var req pbresource.WriteBatchRequest
	for i := range b.instances {
		data, err := anypb.New(&pbcatalog.ServiceInstance{
			Service: serviceName(i / b.perService),
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: 8080,
			Tags: []string{"v1", "zone-" + strconv.Itoa(i%3)},
			Meta: map[string]string{"version": "1.4.2", "owner": "team-" + strconv.Itoa(i%17)},
		})
		if err != nil {
			return nil, err
		}
		req.Resources = append(req.Resources, &pbresource.Resource{
			Id: catalog.ServiceInstanceID(namespace, fmt.Sprintf("%s-%05d", serviceName(i/b.perService), i)), Data: data,
		})
		if len(req.Resources) == batch || i == b.instances-1 {
			if _, err := api.WriteBatch(ctx, &req); err != nil {
				return nil, fmt.Errorf("register instances: %w", err)
			}
			req.Resources = nil
		}
	}
	if err := b.settleWait(ctx); err != nil {
		return nil, err
	}
	r := &readResult{}
	for i, m := range cl.Members {
		rss, err := m.RSS()
		if err != nil {
			return nil, err
		}
		r.rss = append(r.rss, rss)
		if m == cl.leader {
			r.leader = i
		}
	}
	url := "http://" + cl.follower().HTTPAddr + "/v1/health/service/" + service + "?passing"
	client := httpClient(1)
	for i := range b.reads + 1 {
		start := time.Now()
		n, size, err := get(ctx, client, url)
		d := time.Since(start)
		if err != nil {
			return nil, err
		}
		if n != b.perService {
			// The follower may not have applied the last batch yet:
			// wait for it, untimed.
			if i == 0 {
				if err := waitEntries(ctx, client, url, b.perService); err != nil {
					return nil, err
				}
				continue
			}
			return nil, fmt.Errorf("GET %s: %d instances, want %d", url, n, b.perService)
		}
		if i == 0 {
			continue // the first read dials; not counted
		}
		r.latency = append(r.latency, d)
		r.bodySize, r.entries = size, n
	}
	return r, nil
}

func serviceName(s int) string {
	if s == 0 {
		return service
	}
	return "s" + strconv.Itoa(s)
}

// get reads url and returns its entries and its body's size.
func get(ctx context.Context, client *http.Client, url string) (int, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	n, err := entries(body)
	return n, len(body), err
}

func waitEntries(ctx context.Context, client *http.Client, url string, want int) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if n, _, err := get(ctx, client, url); err == nil && n == want {
			return nil
		}
		pause(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("GET %s: not %d instances after 30 s", url, want)
}
