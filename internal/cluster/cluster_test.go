package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"trellis.dev/trellis/internal/storage"
	raftstore "trellis.dev/trellis/internal/storage/raft"
)

// peersAgree reports whether s sees exactly ids as voters, each with its
// gRPC address recorded, and one leader.
func peersAgree(s *server, ids map[string]bool) bool {
	peers, err := s.c.Peers()
	if err != nil || len(peers) != len(ids) {
		return false
	}
	leaders := 0
	for _, p := range peers {
		if !ids[p.ID] || !p.Voter || p.ServerAddr == "" {
			return false
		}
		if p.Leader {
			leaders++
		}
	}
	return leaders == 1 && s.c.Leader() != ""
}

func idsOf(servers ...*server) map[string]bool {
	out := map[string]bool{}
	for _, s := range servers {
		out[s.c.ID()] = true
	}
	return out
}

// TestClusterLifecycle forms a cluster of three fresh servers with
// bootstrap-expect and retry-join, then joins a fourth, restarts a server
// with its data (and once more on a new Raft address), removes a server,
// and loses the leader, checking data and membership at each step.
func TestClusterLifecycle(t *testing.T) {
	logger := testLogger(t)
	var lis []net.Listener
	for range 3 {
		lis = append(lis, listen(t, ""))
	}
	addr := func(i int) string { return lis[i].Addr().String() }
	var servers []*server
	for i := range 3 {
		servers = append(servers, startServer(t, lis[i], Config{
			DataDir:         t.TempDir(),
			BootstrapExpect: 3,
			// A ring: each server knows only the next one, and learns the
			// rest from the exchanges.
			RetryJoin: []string{addr((i + 1) % 3)},
			Logger:    logger.With("server", i+1),
			Tuning:    testTuning(),
		}))
	}
	waitReady(t, servers...)
	ctx := ctxT(t)
	for _, s := range servers {
		eventually(t, 20*time.Second, s.c.ID()+" sees three voters with addresses", func() bool { return peersAgree(s, idsOf(servers...)) })
	}
	written := map[string]string{}
	write := func(via *server, name string) {
		t.Helper()
		res, err := via.c.Backend().WriteCAS(ctx, testResource(name))
		if err != nil {
			t.Fatalf("write %s via %s: %v", name, via.c.ID(), err)
		}
		written[name] = res.GetVersion()
	}
	hasAll := func(s *server) bool {
		for name, v := range written {
			r, err := s.c.Backend().Read(ctx, storage.EventualConsistency, testID(name))
			if err != nil || r.GetVersion() != v {
				return false
			}
		}
		return true
	}
	for i, s := range servers {
		write(s, fmt.Sprint("formed-", i))
	}

	// A fourth fresh server, with the same settings, finds the cluster and
	// joins it.
	fourth := startServer(t, listen(t, ""), Config{
		DataDir: t.TempDir(), BootstrapExpect: 3, RetryJoin: []string{addr(0)},
		Logger: logger.With("server", 4), Tuning: testTuning(),
	})
	waitReady(t, fourth)
	all := append(append([]*server(nil), servers...), fourth)
	for _, s := range all {
		eventually(t, 20*time.Second, s.c.ID()+" sees four voters", func() bool { return peersAgree(s, idsOf(all...)) })
	}
	eventually(t, 20*time.Second, "the fourth server has the data", func() bool { return hasAll(fourth) })
	write(fourth, "via-fourth")

	// Restart a follower with its data dir: same node id, its data, and
	// it serves again.
	leader := leaderAmong(t, all)
	f := others(servers, leader)[0]
	id := f.c.ID()
	restarted := f.restart("")
	if restarted.c.ID() != id {
		t.Fatalf("restarted with node id %s, want %s", restarted.c.ID(), id)
	}
	replace := func(old, now *server) {
		for i := range servers {
			if servers[i] == old {
				servers[i] = now
			}
		}
	}
	replace(f, restarted)
	waitReady(t, restarted)
	eventually(t, 20*time.Second, "the restarted server has its data", func() bool { return hasAll(restarted) })
	write(restarted, "after-restart")

	// Restart it on another Raft port: it gets itself re-admitted at the
	// new address.
	free := listen(t, "")
	newRaft := free.Addr().String()
	free.Close()
	moved := restarted.restart(newRaft)
	replace(restarted, moved)
	all = append(append([]*server(nil), servers...), fourth)
	eventually(t, 30*time.Second, "the cluster has the server's new Raft address", func() bool {
		l := leaderAmong(t, all)
		peers, err := l.c.Peers()
		if err != nil {
			return false
		}
		for _, p := range peers {
			if p.ID == id {
				return p.RaftAddr == newRaft && p.Voter
			}
		}
		return false
	})
	write(leaderAmong(t, all), "after-move")
	eventually(t, 20*time.Second, "the moved server has the data", func() bool { return hasAll(moved) })

	// Remove the fourth server (gone for good) through a follower.
	fourth.stop()
	leader = leaderAmong(t, servers)
	via := others(servers, leader)[0]
	gotID, err := via.c.RemovePeer(ctx, fourth.c.ID())
	if err != nil || gotID != fourth.c.ID() {
		t.Fatalf("remove peer: %q, %v", gotID, err)
	}
	if _, err := via.c.RemovePeer(ctx, "nobody"); !errors.Is(err, ErrPeerNotFound) {
		t.Fatalf("removing an unknown server: %v, want ErrPeerNotFound", err)
	}
	for _, s := range servers {
		eventually(t, 20*time.Second, s.c.ID()+" sees three voters again", func() bool { return peersAgree(s, idsOf(servers...)) })
	}

	// Lose the leader: the two others elect a new one and keep serving.
	leader = leaderAmong(t, servers)
	leader.stop()
	survivors := others(servers, leader)
	newLeader := leaderAmong(t, survivors)
	if newLeader == leader {
		t.Fatal("no new leader")
	}
	for _, s := range survivors {
		write(s, "after-leader-loss-"+s.c.ID())
	}
	for _, s := range survivors {
		eventually(t, 20*time.Second, s.c.ID()+" has every acknowledged write", func() bool { return hasAll(s) })
		if got := s.c.Leader(); got != newLeader.c.Backend().RaftAddr() {
			t.Fatalf("%s reports leader %q, want %q", s.c.ID(), got, newLeader.c.Backend().RaftAddr())
		}
	}
}

// TestDevServer is trellis dev: bootstrap-expect 1 leads at once, with or
// without a data dir, and a restart with the data dir keeps id and data.
func TestDevServer(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprint("durable=", durable), func(t *testing.T) {
			dir := ""
			if durable {
				dir = t.TempDir()
			}
			s := startServer(t, listen(t, ""), Config{DataDir: dir, BootstrapExpect: 1, Logger: testLogger(t), Tuning: raftstore.DevTuning()})
			waitReady(t, s)
			ctx := ctxT(t)
			if _, err := s.c.Backend().WriteCAS(ctx, testResource("a")); err != nil {
				t.Fatal(err)
			}
			peers, err := s.c.Peers()
			if err != nil || len(peers) != 1 || !peers[0].Leader || peers[0].ServerAddr != s.cfg.ServerAddr {
				t.Fatalf("peers %+v, %v", peers, err)
			}
			if !durable {
				return
			}
			id := s.c.ID()
			s = s.restart("")
			waitReady(t, s)
			if s.c.ID() != id {
				t.Fatalf("node id changed: %s -> %s", id, s.c.ID())
			}
			if _, err := s.c.Backend().Read(ctx, storage.StrongConsistency, testID("a")); err != nil {
				t.Fatalf("data lost over a restart: %v", err)
			}
			// Restarted on another Raft port, the leader fixes its own
			// address in the configuration.
			free := listen(t, "")
			moved := free.Addr().String()
			free.Close()
			s = s.restart(moved)
			eventually(t, 20*time.Second, "the configuration has the new Raft address", func() bool {
				peers, err := s.c.Peers()
				return err == nil && len(peers) == 1 && peers[0].RaftAddr == moved && peers[0].Leader
			})
			if s.c.Leader() != moved {
				t.Fatalf("leader %q, want %q", s.c.Leader(), moved)
			}
		})
	}
}

// TestSnapshotSaveRestore saves a server's state, changes it, restores the
// file, and restarts the server: the restored state survives the restart.
func TestSnapshotSaveRestore(t *testing.T) {
	s := startServer(t, listen(t, ""), Config{DataDir: t.TempDir(), BootstrapExpect: 1, Logger: testLogger(t), Tuning: raftstore.DevTuning()})
	waitReady(t, s)
	ctx := ctxT(t)
	b := s.c.Backend()
	for i := range 10 {
		if _, err := b.WriteCAS(ctx, testResource(fmt.Sprint("saved-", i))); err != nil {
			t.Fatal(err)
		}
	}
	var file bytes.Buffer
	if err := s.c.Snapshot(ctx, &file); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteCAS(ctx, testID("saved-0"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteCAS(ctx, testResource("unsaved")); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Restore(ctx, bytes.NewReader(file.Bytes())); err != nil {
		t.Fatal(err)
	}
	check := func(s *server) {
		t.Helper()
		b := s.c.Backend()
		if _, err := b.Read(ctx, storage.StrongConsistency, testID("saved-0")); err != nil {
			t.Fatalf("saved-0 not restored: %v", err)
		}
		if _, err := b.Read(ctx, storage.StrongConsistency, testID("unsaved")); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("unsaved survived the restore: %v", err)
		}
	}
	check(s)
	s = s.restart("")
	waitReady(t, s)
	check(s)
	if _, err := s.c.Backend().WriteCAS(ctx, testResource("after")); err != nil {
		t.Fatal(err)
	}
}
