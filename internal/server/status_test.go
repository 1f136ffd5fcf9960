package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
	"trellis.dev/trellis/internal/server"
)

// TestWriteStatusesThroughAFollower: a follower's resource service checks
// a WriteStatuses request and hands its writes to the leader in one
// batch; a member whose resource is gone or whose version is stale fails
// alone, and what the others wrote is read back from the leader.
func TestWriteStatusesThroughAFollower(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a three-server Raft cluster")
	}
	servers := raftCluster(t, 2*time.Second)
	leader := leaderOf(t, servers)
	var follower *server.Server
	for _, s := range servers {
		if s != leader {
			follower = s
			break
		}
	}
	ctx := context.Background()
	c := pbresource.NewResourceServiceClient(dialGRPC(t, follower.GRPCAddr()))
	waitDefaultNamespace(t, c)
	env := func(name string) *pbresource.Resource {
		data, err := anypb.New(&pbscheduler.Environment{Type: scheduler.TypeDaemon, TaskDefinition: "ls:1"})
		if err != nil {
			t.Fatal(err)
		}
		// Environments are written only through the scheduler's own code
		// (resource.Registration.WrittenThrough): the follower's service,
		// in process, writes them as its operations would.
		out, err := follower.API().Write(resource.FromOperations(ctx), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: scheduler.EnvironmentID("default", name), Data: data}})
		if err != nil {
			t.Fatal(err)
		}
		return out.GetResource()
	}
	a, b := env("a"), env("b")
	// The scheduler reports on them first (its own key, which no client
	// may write): the versions then stay put.
	eventually(t, 30*time.Second, "the scheduler's first report", func() bool {
		for _, id := range []*pbresource.ID{a.GetId(), b.GetId()} {
			r, err := c.Read(ctx, &pbresource.ReadRequest{Id: id, Consistent: true})
			if err != nil || r.GetResource().GetStatus()[scheduler.StatusKey] == nil {
				return false
			}
		}
		return true
	})
	// A key no type declares, as a user's own controller writes it.
	report := func(id *pbresource.ID, version string, state pbresource.State) *pbresource.WriteStatusRequest {
		return &pbresource.WriteStatusRequest{Id: id, Version: version, Key: "auditor", Status: &pbresource.Status{ObservedGeneration: 1,
			Conditions: []*pbresource.Condition{{Type: "Audited", State: state}}}}
	}
	resp, err := c.WriteStatuses(ctx, &pbresource.WriteStatusesRequest{Statuses: []*pbresource.WriteStatusRequest{
		report(a.GetId(), "", pbresource.State_STATE_FALSE),
		report(scheduler.EnvironmentID("default", "gone"), "", pbresource.State_STATE_TRUE),
		report(b.GetId(), "1", pbresource.State_STATE_TRUE),
	}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := resource.StatusResult(resp.GetResults()[0])
	if err != nil {
		t.Fatalf("member 0: %v", err)
	}
	if _, err := resource.StatusResult(resp.GetResults()[1]); codes.Code(resp.GetResults()[1].GetError().GetCode()) != codes.NotFound {
		t.Fatalf("member 1 (no such environment): %v, want NotFound", err)
	}
	if _, err := resource.StatusResult(resp.GetResults()[2]); codes.Code(resp.GetResults()[2].GetError().GetCode()) != codes.Aborted {
		t.Fatalf("member 2 (a stale version): %v, want Aborted", err)
	}
	read, err := pbresource.NewResourceServiceClient(dialGRPC(t, leader.GRPCAddr())).Read(ctx, &pbresource.ReadRequest{Id: a.GetId(), Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	st := read.GetResource().GetStatus()["auditor"]
	if len(st.GetConditions()) != 1 || st.GetConditions()[0].GetState() != pbresource.State_STATE_FALSE || read.GetResource().GetVersion() != got.GetVersion() || read.GetResource().GetGeneration() != 1 {
		t.Fatalf("the leader has %v at version %s generation %d; want Audited false at version %s, generation 1",
			st, read.GetResource().GetVersion(), read.GetResource().GetGeneration(), got.GetVersion())
	}
}
