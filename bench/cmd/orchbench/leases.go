package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"trellis.dev/trellis/internal/testcluster"
)

// leaseTTL is the etcd peer's lease TTL, in seconds: Trellis's default
// heartbeat TTL.
const leaseTTL = 10

// etcdFleet runs the fleet cell on etcd: a 3-member cluster and, from
// this process, one lease per simulated instance (TTL 10 s) with a key
// attached, kept alive by etcd's client (which renews every TTL/3, as a
// Trellis agent heartbeats). The clients are spread over the members as
// `trellis sim`'s agents are over the servers. Then the time etcd takes to
// expire a lease whose keepalive stopped, seen as the DELETE of its key.
func (b *bench) etcdFleet(ctx context.Context) (*fleetResult, error) {
	ps := newProcs(b.cellDir("fleet-etcd"), b.runID)
	defer ps.cleanup()
	members, err := startEtcd(ctx, ps, b.etcd, 3)
	if err != nil {
		return nil, err
	}
	var clis []*clientv3.Client
	defer func() {
		for _, c := range clis {
			c.Close()
		}
	}()
	for _, m := range members {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + m.grpcAddr}, DialTimeout: 5 * time.Second})
		if err != nil {
			return nil, err
		}
		clis = append(clis, c)
	}
	leader, err := etcdLeader(ctx, clis[0], members)
	if err != nil {
		return nil, err
	}
	kctx, stopAll := context.WithCancel(ctx)
	defer stopAll()

	// Deletes of keys under /instances/, as the Instance watch sees downs.
	var dmu sync.Mutex
	deleted := map[string]time.Time{}
	deletedCh := make(chan struct{}, 1)
	wch := clis[0].Watch(clientv3.WithRequireLeader(kctx), "/instances/", clientv3.WithPrefix())

	var acks atomic.Int64 // keepalive answers received
	var alive atomic.Int64
	keep := func(cli *clientv3.Client, key string, lctx context.Context) error {
		lease, err := cli.Grant(ctx, leaseTTL)
		if err != nil {
			return fmt.Errorf("grant: %w", err)
		}
		if _, err := cli.Put(ctx, key, "", clientv3.WithLease(lease.ID)); err != nil {
			return fmt.Errorf("put %s: %w", key, err)
		}
		ch, err := cli.KeepAlive(lctx, lease.ID)
		if err != nil {
			return fmt.Errorf("keepalive: %w", err)
		}
		go func() {
			first := true
			for range ch {
				acks.Add(1)
				if first {
					first = false
					alive.Add(1)
				}
			}
		}()
		return nil
	}
	go func() {
		for resp := range wch {
			now := time.Now()
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					dmu.Lock()
					deleted[string(ev.Kv.Key)] = now
					dmu.Unlock()
					select {
					case deletedCh <- struct{}{}:
					default:
					}
				}
			}
		}
	}()

	r := &fleetResult{}
	t0 := time.Now()
	jobs := make(chan int)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := keep(clis[i%len(clis)], fmt.Sprintf("/instances/sim-%d", i+1), kctx); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range b.instances {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errc:
		return nil, fmt.Errorf("etcd leases: %w", err)
	default:
	}
	if err := testcluster.WaitFor(ctx, 2*time.Minute, func() bool { return alive.Load() >= int64(b.instances) }); err != nil {
		return nil, fmt.Errorf("etcd: %d of %d leases kept alive: %w", alive.Load(), b.instances, err)
	}
	r.register = time.Since(t0)
	fmt.Fprintf(b.progress, "etcd: %d leases kept alive in %s; settling %s\n", b.instances, r.register.Round(time.Millisecond), b.settle)
	if err := pause(ctx, b.settle); err != nil {
		return nil, err
	}

	var ws []watched
	for i, m := range members {
		role := "follower"
		if m == leader {
			role = "leader"
		}
		ws = append(ws, watched{label: fmt.Sprintf("etcd member %d", i), role: role, pid: m.pid()})
	}
	ws = append(ws, self(fmt.Sprintf("orchbench (%d keepalives)", b.instances)))
	acks0 := acks.Load()
	fmt.Fprintf(b.progress, "etcd: measuring %s\n", b.window)
	if r.win, err = measureWindow(ctx, b.window, ws); err != nil {
		return nil, err
	}
	r.beatsPerSec = float64(acks.Load()-acks0) / r.win.elapsed.Seconds()
	if now, err := etcdLeader(ctx, clis[0], members); err != nil || now != leader {
		r.leaderNote = "the leader changed during the window"
	}

	for k := 1; k <= b.dead; k++ {
		key := fmt.Sprintf("/instances/dead-%d", k)
		lctx, stop := context.WithCancel(kctx)
		before := alive.Load()
		if err := keep(clis[k%len(clis)], key, lctx); err != nil {
			stop()
			return nil, err
		}
		if err := testcluster.WaitFor(ctx, time.Minute, func() bool { return alive.Load() > before }); err != nil {
			stop()
			return nil, fmt.Errorf("etcd dead lease %d: no keepalive answer: %w", k, err)
		}
		if err := pause(ctx, deadPhase()); err != nil {
			stop()
			return nil, err
		}
		stopped := time.Now()
		stop()
		var at time.Time
		limit := time.After(2 * time.Minute)
		for at.IsZero() {
			dmu.Lock()
			at = deleted[key]
			dmu.Unlock()
			if !at.IsZero() {
				break
			}
			select {
			case <-deletedCh:
			case <-limit:
				return nil, fmt.Errorf("etcd dead lease %d: %s not deleted within 2m", k, key)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		r.detect = append(r.detect, at.Sub(stopped))
		fmt.Fprintf(b.progress, "etcd: dead lease %d expired %s after its keepalive stopped\n", k, at.Sub(stopped).Round(time.Millisecond))
	}
	return r, nil
}
