package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// The assembled server runs the owner reaper: deleting an owner deletes
// what it owns.
func TestServerRunsOwnerReaper(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	data, err := anypb.New(&pbcore.Namespace{})
	if err != nil {
		t.Fatal(err)
	}
	owner, err := r.grpc.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: &pbresource.ID{Type: nsType, Name: "team-a"}, Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	ownedID := &pbresource.ID{Type: nsType, Name: "team-a-sandbox"}
	if _, err := r.grpc.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: ownedID, Owner: owner.GetResource().GetId(), Data: data}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.grpc.Delete(ctx, &pbresource.DeleteRequest{Id: owner.GetResource().GetId()}); err != nil {
		t.Fatal(err)
	}
	// Wait for the reaper through a watch, not a sleep.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := r.grpc.WatchList(wctx, &pbresource.WatchListRequest{Type: nsType, Tenancy: &pbresource.Tenancy{}, NamePrefix: ownedID.GetName()})
	if err != nil {
		t.Fatal(err)
	}
	present := false
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatalf("owned namespace was not reaped: %v", err)
		}
		switch ev.GetOp() {
		case pbresource.WatchEvent_OP_UPSERT:
			present = true
		case pbresource.WatchEvent_OP_DELETE:
			present = false
		}
		if !present && ev.GetOp() != pbresource.WatchEvent_OP_UPSERT {
			break
		}
	}
	_, err = r.grpc.Read(ctx, &pbresource.ReadRequest{Id: ownedID, Consistent: true})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("Read after reaping = %v, want NotFound", err)
	}
}
