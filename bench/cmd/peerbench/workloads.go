package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// runWrites has conc writers put as fast as they can for d (after a short
// warm-up that is not counted). Each writer cycles over its own 1,000 keys,
// named after prefix, so the store's size stays bounded, writers do not
// contend on keys, and every cell starts on keys of its own: no cell
// updates what an earlier one created. cpu, read as the measured time
// starts and ends, gives the servers' CPU time per write.
func runWrites(ctx context.Context, w writer, prefix string, conc int, d time.Duration, cpu func() time.Duration) result {
	warm := min(d/5, time.Second)
	start := time.Now()
	measureFrom := start.Add(warm)
	stop := measureFrom.Add(d)
	cpuDone := make(chan time.Duration, 1)
	time.AfterFunc(warm, func() {
		from := cpu()
		time.AfterFunc(time.Until(stop), func() { cpuDone <- cpu() - from })
	})
	var (
		mu     sync.Mutex
		lat    []time.Duration
		errCnt int
		wg     sync.WaitGroup
	)
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			var errs int
			for j := 0; ; j++ {
				t0 := time.Now()
				if t0.After(stop) || ctx.Err() != nil {
					break
				}
				err := w.put(ctx, fmt.Sprintf("%s-w%d-%d", prefix, i, j%1000), valueFor(i, j))
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					errs++
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errCnt += errs
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := summarize(lat, errCnt, d)
	if r.ops > 0 {
		r.cpuPerOp = <-cpuDone / time.Duration(r.ops)
	}
	return r
}

// runBatches writes n resources in atomic batches of size through gRPC,
// with inflight batches outstanding at once, and returns resources per
// second.
func runBatches(ctx context.Context, c *cluster, n, size, inflight int, prefix string) (float64, error) {
	conn, err := grpc.NewClient(c.members[0].grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	cli := pbresource.NewResourceServiceClient(conn)
	data, err := anypb.New(&pbcore.Namespace{Description: payload})
	if err != nil {
		return 0, err
	}
	batches := make(chan int)
	errs := make(chan error, inflight)
	var wg sync.WaitGroup
	start := time.Now()
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				req := &pbresource.WriteBatchRequest{}
				for i := range size {
					req.Resources = append(req.Resources, namespaceResource(fmt.Sprintf("%s-%d-%d", prefix, b, i), data))
				}
				if _, err := cli.WriteBatch(ctx, req); err != nil {
					errs <- fmt.Errorf("batch %d: %w", b, err)
					return
				}
			}
		}()
	}
feed:
	for b := 0; b < n/size; b++ {
		select {
		case batches <- b:
		case err := <-errs:
			close(batches)
			wg.Wait()
			return 0, err
		}
		if ctx.Err() != nil {
			break feed
		}
	}
	close(batches)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// fanout measures, for each of writes writes, the time from the write's
// acknowledgement until the last of watchers watchers has received it.
type fanout struct {
	watchers, writes int
	interval         time.Duration
}

func (f fanout) trellis(ctx context.Context, c *cluster) (result, error) {
	// Watchers are spread over a few connections, as many clients would be.
	var conns []*grpc.ClientConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range 8 {
		conn, err := grpc.NewClient(c.members[0].grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return result{}, err
		}
		conns = append(conns, conn)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := newReceipts(f.watchers, f.writes)
	var ready sync.WaitGroup
	for i := range f.watchers {
		ready.Add(1)
		cli := pbresource.NewResourceServiceClient(conns[i%len(conns)])
		go func() {
			stream, err := cli.WatchList(ctx, &pbresource.WatchListRequest{Type: namespaceType, Tenancy: &pbresource.Tenancy{}, NamePrefix: "fan-"})
			if err != nil {
				rec.fail(err)
				ready.Done()
				return
			}
			signalled := false
			for {
				ev, err := stream.Recv()
				if err != nil {
					if !signalled {
						ready.Done()
					}
					if ctx.Err() == nil && !errors.Is(err, io.EOF) {
						rec.fail(err)
					}
					return
				}
				switch ev.GetOp() {
				case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
					if !signalled {
						signalled = true
						ready.Done()
					}
				case pbresource.WatchEvent_OP_UPSERT:
					rec.got(ev.GetResource().GetId().GetName())
				}
			}
		}()
	}
	ready.Wait()
	w, err := newTrellisGRPC(&cluster{members: c.members[:1]})
	if err != nil {
		return result{}, err
	}
	defer w.close()
	return rec.measure(ctx, f, func(key string) error { return w.put(ctx, key, payload) })
}

func (f fanout) etcd(ctx context.Context, c *cluster) (result, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + c.members[0].grpcAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return result{}, err
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := newReceipts(f.watchers, f.writes)
	var ready sync.WaitGroup
	for range f.watchers {
		ready.Add(1)
		go func() {
			// A distinct watch per watcher: RequireLeader makes the client
			// open it as its own gRPC watcher rather than sharing one.
			wch := cli.Watch(clientv3.WithRequireLeader(ctx), "/bench/fan-", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
			first := true
			for resp := range wch {
				if first {
					first = false
					ready.Done()
				}
				for _, ev := range resp.Events {
					rec.got(string(ev.Kv.Key[len("/bench/"):]))
				}
			}
		}()
	}
	ready.Wait()
	return rec.measure(ctx, f, func(key string) error {
		_, err := cli.Put(ctx, "/bench/"+key, payload)
		return err
	})
}

// receipts counts, per written key, how many watchers have seen it and when
// the last one did.
type receipts struct {
	watchers int
	mu       sync.Mutex
	count    map[string]int
	last     map[string]time.Time
	done     map[string]chan struct{}
	errs     atomic.Int64
	firstErr atomic.Value
}

func newReceipts(watchers, writes int) *receipts {
	r := &receipts{watchers: watchers, count: map[string]int{}, last: map[string]time.Time{}, done: map[string]chan struct{}{}}
	for i := range writes {
		r.done[fanKey(i)] = make(chan struct{})
	}
	return r
}

func fanKey(i int) string { return fmt.Sprintf("fan-%d", i) }

func (r *receipts) fail(err error) {
	r.errs.Add(1)
	r.firstErr.CompareAndSwap(nil, err)
}

func (r *receipts) got(key string) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count[key]++
	if r.count[key] == r.watchers {
		r.last[key] = now
		if ch, ok := r.done[key]; ok {
			close(ch)
		}
	}
}

func (r *receipts) measure(ctx context.Context, f fanout, put func(string) error) (result, error) {
	var lat []time.Duration
	start := time.Now()
	for i := range f.writes {
		key := fanKey(i)
		if err := put(key); err != nil {
			return result{}, err
		}
		acked := time.Now()
		select {
		case <-r.done[key]:
		case <-time.After(10 * time.Second):
			return result{}, fmt.Errorf("write %s: not every watcher saw it within 10s (errors: %d, first: %v)", key, r.errs.Load(), r.firstErr.Load())
		case <-ctx.Done():
			return result{}, ctx.Err()
		}
		r.mu.Lock()
		d := r.last[key].Sub(acked)
		r.mu.Unlock()
		lat = append(lat, max(d, 0))
		time.Sleep(f.interval) // pacing between writes, not a wait for a condition
	}
	slices.Sort(lat)
	return summarize(lat, 0, time.Since(start)), nil
}
