package raft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

func TestFollowerForwarding(t *testing.T) {
	nodes := startCluster(t, 3, false, testTuning())
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	ctx := ctxT(t)

	// A write through a follower is committed by the leader and visible to
	// a strong read through the follower at once.
	a := mustWrite(t, f.b, testResource("a"))
	got, err := f.b.Read(ctx, storage.StrongConsistency, testID("a"))
	if err != nil || got.GetVersion() != a.GetVersion() {
		t.Fatalf("strong read through follower: %v, %v; want version %s", got, err, a.GetVersion())
	}
	// Every server applies it at the same index: the version is the same.
	for _, n := range nodes {
		eventually(t, 10*time.Second, n.id+" applies a", func() bool {
			r, err := n.b.Read(ctx, storage.EventualConsistency, testID("a"))
			return err == nil && r.GetVersion() == a.GetVersion()
		})
	}

	// CAS errors come back through forwarding with their sentinels.
	stale := testResource("a")
	stale.Version = "1"
	if _, err := f.b.WriteCAS(ctx, stale); !errors.Is(err, storage.ErrCASFailure) {
		t.Fatalf("stale write through follower: %v, want ErrCASFailure", err)
	}
	wrongUID := testResource("a")
	wrongUID.Id.Uid = "other"
	wrongUID.Version = a.GetVersion()
	if _, err := f.b.WriteCAS(ctx, wrongUID); !errors.Is(err, storage.ErrWrongUID) {
		t.Fatalf("wrong uid through follower: %v, want ErrWrongUID", err)
	}
	_, err = f.b.WriteBatch(ctx, []*pbresource.Resource{testResource("b"), testResource("a")})
	if !errors.Is(err, storage.ErrBatchConflict) || !errors.Is(err, storage.ErrCASFailure) {
		t.Fatalf("conflicting batch through follower: %v, want ErrBatchConflict and ErrCASFailure", err)
	}
	if _, err := f.b.Read(ctx, storage.StrongConsistency, testID("b")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("refused batch wrote b: %v", err)
	}

	// A batch is one entry: one version for all.
	out, err := f.b.WriteBatch(ctx, []*pbresource.Resource{testResource("b"), testResource("c")})
	if err != nil || len(out) != 2 || out[0].GetVersion() != out[1].GetVersion() {
		t.Fatalf("batch through follower: %v, %v", out, err)
	}
	list, err := f.b.List(ctx, storage.StrongConsistency, testType, &pbresource.Tenancy{Namespace: ids.WildcardNamespace}, "")
	if err != nil || len(list) != 3 {
		t.Fatalf("strong list through follower: %d resources, %v; want 3", len(list), err)
	}

	// Deletes: a stale version is refused, the right one deletes.
	if err := f.b.DeleteCAS(ctx, testID("b"), "1"); !errors.Is(err, storage.ErrCASFailure) {
		t.Fatalf("stale delete: %v", err)
	}
	if err := f.b.DeleteCAS(ctx, testID("b"), out[0].GetVersion()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.b.Read(ctx, storage.StrongConsistency, testID("b")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("read after delete through follower: %v", err)
	}

	// Nothing invalid reaches the log.
	if _, err := f.b.WriteCAS(ctx, &pbresource.Resource{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("write without id: %v", err)
	}
}

func TestLargeListIsPaged(t *testing.T) {
	nodes := startCluster(t, 3, false, testTuning())
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	ctx := ctxT(t)
	// 1.5 MiB of resources in one batch: the forwarded list needs pages.
	var batch []*pbresource.Resource
	payload := string(make([]byte, 32<<10))
	for i := range 48 {
		r := testResource(fmt.Sprintf("big-%02d", i))
		r.Metadata["payload"] = payload
		batch = append(batch, r)
	}
	if _, err := f.b.WriteBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	list, err := f.b.List(ctx, storage.StrongConsistency, testType, &pbresource.Tenancy{Namespace: "default"}, "big-")
	if err != nil || len(list) != 48 {
		t.Fatalf("list: %d, %v", len(list), err)
	}
}

// TestLeaderLoss shuts the leader down under a stream of writes through
// every server: a new leader takes over, writes through the survivors keep
// succeeding, every failure is retryable, and every acknowledged write is
// on every survivor.
func TestLeaderLoss(t *testing.T) {
	nodes := startCluster(t, 3, true, testTuning())
	leader := leaderOf(t, nodes)

	var mu sync.Mutex
	acked := map[string]string{} // name -> version
	var stopped sync.WaitGroup
	stop := make(chan struct{})
	for wi, n := range nodes {
		stopped.Add(1)
		go func() {
			defer stopped.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", wi, i)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				res, err := n.b.WriteCAS(ctx, testResource(name))
				cancel()
				if err != nil {
					if !errors.Is(err, storage.ErrUnavailable) {
						t.Errorf("write %s through %s: %v is not retryable", name, n.id, err)
						return
					}
					if errors.Is(err, ErrShutdown) {
						return
					}
					continue
				}
				mu.Lock()
				acked[name] = res.GetVersion()
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	eventually(t, 20*time.Second, "writes flow before the leader is lost", func() bool { return count() >= 30 })
	leader.stop()
	survivors := followersOf(nodes, leader)
	before := count()
	newLeader := leaderOf(t, survivors)
	eventually(t, 30*time.Second, "writes flow again after the leader is lost", func() bool { return count() >= before+30 })
	close(stop)
	stopped.Wait()

	ctx := ctxT(t)
	if _, err := newLeader.b.WriteCAS(ctx, testResource("last")); err != nil {
		t.Fatal(err)
	}
	for _, n := range survivors {
		eventually(t, 10*time.Second, n.id+" catches up", func() bool {
			_, err := n.b.Read(ctx, storage.EventualConsistency, testID("last"))
			return err == nil
		})
		for name, version := range acked {
			r, err := n.b.Read(ctx, storage.EventualConsistency, testID(name))
			if err != nil || r.GetVersion() != version {
				t.Fatalf("acknowledged write %s (version %s) on %s: %v, %v", name, version, n.id, r, err)
			}
		}
	}
	t.Logf("%d acknowledged writes, all present", len(acked))
}

// TestWatchResumesOnAnotherServer resumes a watch, after a leader change,
// on another server from the last index it saw: it gets every later change
// exactly once, in order.
func TestWatchResumesOnAnotherServer(t *testing.T) {
	nodes := startCluster(t, 3, false, testTuning())
	leader := leaderOf(t, nodes)
	ctx := ctxT(t)
	all := &pbresource.Tenancy{Namespace: ids.WildcardNamespace}

	w, err := leader.b.WatchList(ctx, testType, all, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := w.Next(ctx); err != nil || ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
		t.Fatalf("first event: %v %v", ev, err)
	}
	var last uint64
	for i := range 5 {
		res := mustWrite(t, leader.b, testResource("p1-"+strconv.Itoa(i)))
		ev, err := w.Next(ctx)
		if err != nil || ev.GetResource().GetVersion() != res.GetVersion() {
			t.Fatalf("event %d: %v %v", i, ev, err)
		}
		last = ev.GetIndex()
	}
	w.Close()

	// Changes the watcher misses: some before and some after the leader
	// changes.
	var want []string
	for i := range 5 {
		res := mustWrite(t, nodes[i%3].b, testResource("p2-"+strconv.Itoa(i)))
		want = append(want, res.GetId().GetName()+"@"+res.GetVersion())
	}
	leader.stop()
	survivors := followersOf(nodes, leader)
	leaderOf(t, survivors)
	for i := range 5 {
		res := mustWrite(t, survivors[i%2].b, testResource("p3-"+strconv.Itoa(i)))
		want = append(want, res.GetId().GetName()+"@"+res.GetVersion())
	}

	resumed := map[*node]storage.Watch{}
	for _, n := range survivors {
		rw, err := n.b.WatchList(ctx, testType, all, "", last)
		if err != nil {
			t.Fatalf("resume on %s: %v", n.id, err)
		}
		resumed[n] = rw
	}
	for _, n := range survivors {
		rw := resumed[n]
		var got []string
		for len(got) < len(want) {
			ev, err := rw.Next(ctx)
			if err != nil {
				t.Fatalf("resumed watch on %s: %v (got %v)", n.id, err, got)
			}
			if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
				continue
			}
			got = append(got, ev.GetResource().GetId().GetName()+"@"+ev.GetResource().GetVersion())
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("resumed watch on %s:\n got %v\nwant %v", n.id, got, want)
		}
	}
	// Nothing more: no duplicate arrives later.
	mustWrite(t, survivors[0].b, testResource("fence"))
	for _, n := range survivors {
		ev, err := resumed[n].Next(ctx)
		if err == nil && ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			ev, err = resumed[n].Next(ctx)
		}
		if err != nil || ev.GetResource().GetId().GetName() != "fence" {
			t.Fatalf("after the resumed changes on %s: %v %v", n.id, ev, err)
		}
		resumed[n].Close()
	}
}

func TestLeaderCh(t *testing.T) {
	nodes := startCluster(t, 3, false, testTuning())
	leader := leaderOf(t, nodes)
	ctx := ctxT(t)
	next := func(ch <-chan bool) bool {
		t.Helper()
		select {
		case v := <-ch:
			return v
		case <-ctx.Done():
			t.Fatal("no leadership value")
		}
		return false
	}
	chans := map[*node]<-chan bool{}
	for _, n := range nodes {
		chans[n] = n.b.LeaderCh()
		if got := next(chans[n]); got != (n == leader) {
			t.Fatalf("%s first value %v, leader is %s", n.id, got, leader.id)
		}
	}
	if err := leader.b.TransferLeadership(ctx); err != nil {
		t.Fatal(err)
	}
	if next(chans[leader]) {
		t.Fatal("old leader did not get false")
	}
	newLeader := leaderOf(t, nodes)
	if newLeader == leader {
		t.Fatal("leadership did not move")
	}
	if !next(chans[newLeader]) {
		t.Fatal("new leader did not get true")
	}
	leader.stop()
	if _, ok := <-chans[leader]; ok {
		t.Fatal("channel not closed at shutdown")
	}
}

// TestNoQuorum: with two of three servers gone, requests wait for a leader
// for the hold time and then fail with a retryable error; nothing hangs,
// nothing is acknowledged.
func TestNoQuorum(t *testing.T) {
	tuning := testTuning()
	tuning.HoldTimeout = 500 * time.Millisecond
	nodes := startCluster(t, 3, false, tuning)
	leader := leaderOf(t, nodes)
	mustWrite(t, leader.b, testResource("before"))
	for _, n := range followersOf(nodes, leader) {
		n.stop()
	}
	ctx := ctxT(t)
	eventually(t, 10*time.Second, "the leader steps down", func() bool { return !leader.b.IsLeader() })
	_, err := leader.b.WriteCAS(ctx, testResource("during"))
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("write without quorum: %v, want ErrUnavailable", err)
	}
	if _, err := leader.b.Read(ctx, storage.StrongConsistency, testID("before")); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("strong read without quorum: %v, want ErrUnavailable", err)
	}
	// Eventual reads still answer from the local copy.
	if _, err := leader.b.Read(ctx, storage.EventualConsistency, testID("before")); err != nil {
		t.Fatalf("eventual read without quorum: %v", err)
	}
	// A caller that gives up is told so, retryably.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := leader.b.WriteCAS(cctx, testResource("cancelled")); !errors.Is(err, storage.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write: %v", err)
	}
}

// TestForwardingNeverSent: when the leader's gRPC port is down, a
// follower's forwarded write never leaves the follower, so its failure
// says the write was not made (retryable, outcome known); once the port
// is back, the same follower's writes go through.
func TestForwardingNeverSent(t *testing.T) {
	tuning := testTuning()
	tuning.HoldTimeout = 300 * time.Millisecond
	nodes := startCluster(t, 3, false, tuning)
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	mustWrite(t, f.b, testResource("before"))

	leader.srv.Stop()
	<-leader.done
	// Once the follower's connection has seen the port close (a request
	// written into a connection as it breaks may have been received: that
	// one's outcome is unknown), nothing is sent any more.
	conn, err := f.b.conns.get(leader.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the connection to the leader is down", func() bool {
		return conn.GetState() != connectivity.Ready
	})
	ctx := ctxT(t)
	_, err = f.b.WriteCAS(ctx, testResource("during"))
	if !errors.Is(err, storage.ErrUnavailable) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("write while the leader's gRPC port is down: %v; want ErrUnavailable without ErrOutcomeUnknown", err)
	}
	if _, err := leader.b.Read(ctx, storage.StrongConsistency, testID("during")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the refused write was made: %v", err)
	}

	// Serve the leader's gRPC port again.
	lis, err := net.Listen("tcp", leader.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	leader.b.RegisterGRPC(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	eventually(t, 20*time.Second, "forwarding works again", func() bool {
		_, err := f.b.WriteCAS(ctx, testResource("after"))
		return err == nil
	})
}

// TestWatchFromTheFuture: a watch asked to resume from an index no server
// issued is refused (re-list) instead of waiting forever or skipping
// every later change.
func TestWatchFromTheFuture(t *testing.T) {
	tuning := testTuning()
	tuning.HoldTimeout = 300 * time.Millisecond
	nodes := startCluster(t, 3, false, tuning)
	leader := leaderOf(t, nodes)
	last := mustWrite(t, leader.b, testResource("a"))
	ctx := ctxT(t)
	all := &pbresource.Tenancy{Namespace: ids.WildcardNamespace}
	for _, n := range nodes {
		if _, err := n.b.WatchList(ctx, testType, all, "", 1<<40); !errors.Is(err, storage.ErrIndexTooOld) {
			t.Fatalf("watch on %s from index 2^40: %v, want ErrIndexTooOld", n.id, err)
		}
	}
	// The last index issued is fine everywhere, and later changes arrive.
	idx, _ := strconv.ParseUint(last.GetVersion(), 10, 64)
	var watches []storage.Watch
	for _, n := range nodes {
		w, err := n.b.WatchList(ctx, testType, all, "", idx)
		if err != nil {
			t.Fatalf("watch on %s from %d: %v", n.id, idx, err)
		}
		defer w.Close()
		watches = append(watches, w)
	}
	b := mustWrite(t, leader.b, testResource("b"))
	for i, w := range watches {
		for {
			ev, err := w.Next(ctx)
			if err != nil {
				t.Fatalf("watch on %s: %v", nodes[i].id, err)
			}
			if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
				continue
			}
			if ev.GetResource().GetVersion() != b.GetVersion() {
				t.Fatalf("watch on %s: got %v, want b", nodes[i].id, ev)
			}
			break
		}
	}
}
