package raft

import (
	"fmt"
	"testing"
	"time"

	"trellis.dev/trellis/internal/storage"
)

// TestRestartedFollowerNeverListsThePast restarts a follower from its data
// dir after the cluster moved on without it: its first eventual list is
// the present (it waits for the catch-up), never the state it restarted
// from, and it is healthy only once it has caught up.
func TestRestartedFollowerNeverListsThePast(t *testing.T) {
	nodes := startCluster(t, 3, true, testTuning())
	leader := leaderOf(t, nodes)
	follower := followersOf(nodes, leader)[0]
	ctx := ctxT(t)
	for i := range 20 {
		mustWrite(t, leader.b, testResource(fmt.Sprintf("before-%02d", i)))
	}
	follower.stop()
	for i := range 200 {
		mustWrite(t, leader.b, testResource(fmt.Sprintf("after-%03d", i)))
	}
	if err := leader.b.DeleteCAS(ctx, testID("before-00"), ""); err != nil {
		t.Fatal(err)
	}
	want, err := leader.b.List(ctx, storage.StrongConsistency, testResource("x").GetId().GetType(), testResource("x").GetId().GetTenancy(), "")
	if err != nil {
		t.Fatal(err)
	}

	restarted := startNode(t, follower.id, follower.dir, follower.raftAddr, follower.grpcAddr, follower.tuning, follower.logger)
	if h := restarted.b.Health(); h.OK {
		t.Fatalf("health right after a restart: %+v; want not caught up", h)
	}
	got, err := restarted.b.List(ctx, storage.EventualConsistency, testResource("x").GetId().GetType(), testResource("x").GetId().GetTenancy(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !restarted.b.CaughtUp() {
		t.Fatal("an eventual list answered before the server caught up")
	}
	if len(got) != len(want) {
		t.Fatalf("the restarted follower's first list has %d resources, the leader's %d", len(got), len(want))
	}
	for i := range want {
		if got[i].GetId().GetName() != want[i].GetId().GetName() || got[i].GetVersion() != want[i].GetVersion() {
			t.Fatalf("list[%d] = %s@%s, want %s@%s", i, got[i].GetId().GetName(), got[i].GetVersion(), want[i].GetId().GetName(), want[i].GetVersion())
		}
	}
	eventually(t, 10*time.Second, "the restarted follower is healthy", func() bool { return restarted.b.Health().OK })
}

// TestFollowersUnhealthyWhenTheLeaderDies: a follower stops calling itself
// healthy once it has not heard from the leader within the heartbeat
// timeout, before an election names a new one.
func TestFollowersUnhealthyWhenTheLeaderDies(t *testing.T) {
	nodes := startCluster(t, 3, false, testTuning())
	leader := leaderOf(t, nodes)
	followers := followersOf(nodes, leader)
	for _, f := range followers {
		eventually(t, 10*time.Second, f.id+" healthy", func() bool { return f.b.Health().OK })
	}
	leader.stop()
	killed := time.Now()
	bound := testTuning().HeartbeatTimeout
	for _, f := range followers {
		eventually(t, 10*time.Second, f.id+" unhealthy or under a new leader", func() bool {
			h := f.b.Health()
			if h.OK && h.Leader == leader.id && time.Since(killed) > bound+250*time.Millisecond {
				t.Fatalf("%s healthy under the dead leader %s, %s after it died: %+v", f.id, leader.id, time.Since(killed), h)
			}
			return !h.OK || (h.Leader != "" && h.Leader != leader.id)
		})
	}
}
