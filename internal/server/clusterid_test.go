package server_test

import (
	"context"
	"testing"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/core"
)

// On a three-server Raft cluster the first leader fixes the cluster id;
// every server reads the same one; after a leader change, and a bootstrap
// on the new leader, it is the same id at the same version (never
// rewritten).
func TestClusterIDSurvivesALeaderChange(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a three-server Raft cluster")
	}
	servers := raftCluster(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	leader := leaderOf(t, servers)

	var id string
	eventually(t, 30*time.Second, "the first leader's cluster id", func() bool {
		var err error
		id, err = core.ClusterID(ctx, leader.API())
		return err == nil
	})
	stored, err := leader.API().Read(ctx, &pbresource.ReadRequest{Id: core.ClusterResourceID(), Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	sameEverywhere := func(when string) {
		t.Helper()
		for i, s := range servers {
			var got string
			eventually(t, 30*time.Second, "a server's copy of the cluster id", func() bool {
				got, err = core.ClusterID(ctx, s.API())
				return err == nil
			})
			if got != id {
				t.Fatalf("%s: server %d reads cluster id %q, want %q", when, i, got, id)
			}
		}
	}
	sameEverywhere("first leader")

	if err := raftBackend(leader).TransferLeadership(ctx); err != nil {
		t.Fatalf("transferring leadership: %v", err)
	}
	newLeader := leaderOf(t, servers)
	if newLeader == leader {
		t.Fatal("leadership did not move")
	}
	// The new leader's own bootstrap runs in the background; run one more
	// here so that the test does not depend on when it does.
	if err := core.Bootstrap(ctx, newLeader.API()); err != nil {
		t.Fatal(err)
	}
	sameEverywhere("new leader")
	after, err := newLeader.API().Read(ctx, &pbresource.ReadRequest{Id: core.ClusterResourceID(), Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResource().GetVersion() != stored.GetResource().GetVersion() || after.GetResource().GetId().GetUid() != stored.GetResource().GetId().GetUid() {
		t.Fatalf("the cluster resource was rewritten: version %s uid %s, was %s %s", after.GetResource().GetVersion(), after.GetResource().GetId().GetUid(),
			stored.GetResource().GetVersion(), stored.GetResource().GetId().GetUid())
	}
}
