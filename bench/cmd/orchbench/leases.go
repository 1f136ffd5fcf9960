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
	clis, err := dialEtcd(members)
	if err != nil {
		return nil, err
	}
	defer closeEtcd(clis)
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

	k := &leaseKeeper{}
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
	if err := k.keepMany(ctx, kctx, clis, "/instances/sim-", b.instances); err != nil {
		return nil, err
	}
	r.register = time.Since(t0)
	fmt.Fprintf(b.progress, "etcd: %d leases kept alive in %s; settling %s\n", b.instances, r.register.Round(time.Millisecond), b.settle)
	if err := pause(ctx, b.settle); err != nil {
		return nil, err
	}

	ws := append(serversWatched("etcd member", members, leader), self(fmt.Sprintf("orchbench (%d keepalives)", b.instances)))
	acks0 := k.acks.Load()
	fmt.Fprintf(b.progress, "etcd: measuring %s\n", b.window)
	if r.win, err = measureWindow(ctx, b.window, ws); err != nil {
		return nil, err
	}
	r.beatsPerSec = float64(k.acks.Load()-acks0) / r.win.elapsed.Seconds()
	if now, err := etcdLeader(ctx, clis[0], members); err != nil || now != leader {
		r.leaderNote = "the leader changed during the window"
	}

	for i := 1; i <= b.dead; i++ {
		key := fmt.Sprintf("/instances/dead-%d", i)
		lctx, stop := context.WithCancel(kctx)
		before := k.alive.Load()
		if err := k.keep(ctx, lctx, clis[i%len(clis)], key); err != nil {
			stop()
			return nil, err
		}
		if err := testcluster.WaitFor(ctx, time.Minute, func() bool { return k.alive.Load() > before }); err != nil {
			stop()
			return nil, fmt.Errorf("etcd dead lease %d: no keepalive answer: %w", i, err)
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
				return nil, fmt.Errorf("etcd dead lease %d: %s not deleted within 2m", i, key)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		r.detect = append(r.detect, at.Sub(stopped))
		fmt.Fprintf(b.progress, "etcd: dead lease %d expired %s after its keepalive stopped\n", i, at.Sub(stopped).Round(time.Millisecond))
	}
	return r, nil
}

// leaseKeeper grants leases, each with a key attached, and keeps them
// alive through etcd's client (which renews every TTL/3, as a Trellis
// agent heartbeats): the etcd peer's stand-in for a fleet of instances.
type leaseKeeper struct {
	acks  atomic.Int64 // keepalive answers received
	alive atomic.Int64 // leases that had at least one answer
}

// keep grants a lease of leaseTTL, puts key on it and keeps it alive
// until lctx ends.
func (k *leaseKeeper) keep(ctx, lctx context.Context, cli *clientv3.Client, key string) error {
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
			k.acks.Add(1)
			if first {
				first = false
				k.alive.Add(1)
			}
		}
	}()
	return nil
}

// keepMany keeps n leases alive, keys prefix1..prefixN, spread over clis
// (32 granted at a time), until lctx ends, and returns once each has been
// answered.
func (k *leaseKeeper) keepMany(ctx, lctx context.Context, clis []*clientv3.Client, prefix string, n int) error {
	before := k.alive.Load()
	jobs := make(chan int)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := k.keep(ctx, lctx, clis[i%len(clis)], fmt.Sprintf("%s%d", prefix, i+1)); err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errc:
		return fmt.Errorf("etcd leases: %w", err)
	default:
	}
	if err := testcluster.WaitFor(ctx, 2*time.Minute, func() bool { return k.alive.Load() >= before+int64(n) }); err != nil {
		return fmt.Errorf("etcd: %d of %d leases kept alive: %w", k.alive.Load()-before, n, err)
	}
	return nil
}
