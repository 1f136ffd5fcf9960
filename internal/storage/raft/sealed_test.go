package raft

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/storage"
)

const sealedSecret = "PRIVATE-KEY-MATERIAL-9d2e"

func sealedResource(name string) *pbresource.Resource {
	return &pbresource.Resource{
		Id:       &pbresource.ID{Type: sealedType, Tenancy: &pbresource.Tenancy{}, Name: name, Uid: "uid-" + name},
		Metadata: map[string]string{"key": sealedSecret},
	}
}

// A sealed type never leaves a server by the forwarding service: Read and
// List of it on the leader's server port are refused, naming the type,
// whoever asks and whatever the id. A follower still reads it strongly,
// from its own store after the leader's read index: each read sees the
// write acknowledged just before it (through the leader or the follower),
// which it could not if it were forwarded (refused) or read locally
// without the barrier (behind).
func TestSealedTypeIsNeverForwarded(t *testing.T) {
	nodes := startCluster(t, 3, false, testTuning())
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	ctx := ctxT(t)

	// Forwarding.Read and List on the leader's server port, as any caller
	// that reaches it: refused for the sealed type, served for another.
	mustWrite(t, leader.b, sealedResource("k-0"))
	mustWrite(t, leader.b, testResource("plain"))
	conn, err := grpc.NewClient(leader.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fwd := pbstorage.NewForwardingClient(conn)
	refused := map[string]error{}
	rr, err := fwd.Read(ctx, &pbstorage.ReadRequest{Id: sealedResource("k-0").GetId()})
	refused["Read"] = err
	if rr.GetResource() != nil {
		t.Errorf("Forwarding.Read of the sealed type returned %v", rr.GetResource())
	}
	for name, req := range map[string]*pbstorage.ListRequest{
		"List":           {Type: sealedType, Tenancy: &pbresource.Tenancy{}},
		"List wildcard":  {Type: sealedType, Tenancy: &pbresource.Tenancy{Namespace: "*"}},
		"List by prefix": {Type: sealedType, Tenancy: &pbresource.Tenancy{}, NamePrefix: "k-"},
	} {
		stream, err := fwd.List(ctx, req)
		if err != nil {
			refused[name] = err
			continue
		}
		for {
			page, err := stream.Recv()
			if err != nil {
				refused[name] = err
				break
			}
			if len(page.GetResources()) > 0 {
				t.Errorf("Forwarding.%s of the sealed type returned %d resources", name, len(page.GetResources()))
			}
		}
	}
	for call, err := range refused {
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "test/v1/Sealed is sealed") || strings.Contains(err.Error(), sealedSecret) {
			t.Errorf("Forwarding.%s of the sealed type = %v; want PermissionDenied naming the type, without the secret", call, err)
		}
	}
	if rr, err := fwd.Read(ctx, &pbstorage.ReadRequest{Id: testID("plain")}); err != nil || rr.GetResource() == nil {
		t.Errorf("Forwarding.Read of a plain type = %v, %v; want it served", rr, err)
	}
	if stream, err := fwd.List(ctx, &pbstorage.ListRequest{Type: testType, Tenancy: &pbresource.Tenancy{Namespace: "*"}}); err != nil {
		t.Errorf("Forwarding.List of a plain type: %v", err)
	} else if page, err := stream.Recv(); err != nil || len(page.GetResources()) != 1 {
		t.Errorf("Forwarding.List of a plain type = %v, %v; want the one resource", page, err)
	} else if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("Forwarding.List of a plain type ended with %v", err)
	}

	// A follower's strong reads of the sealed type see every write
	// acknowledged before them, by the leader or by itself.
	for i := range 20 {
		via := leader
		if i%2 == 1 {
			via = f
		}
		w := mustWrite(t, via.b, sealedResource(fmt.Sprintf("k-%d", i+1)))
		got, err := f.b.Read(ctx, storage.StrongConsistency, w.GetId())
		if err != nil || got.GetVersion() != w.GetVersion() {
			t.Fatalf("strong read %d on the follower after a write through %s = %v, %v; want version %s", i, via.id, got, err, w.GetVersion())
		}
		list, err := f.b.List(ctx, storage.StrongConsistency, sealedType, &pbresource.Tenancy{}, "k-")
		if err != nil || len(list) != i+2 {
			t.Fatalf("strong list %d on the follower = %d resources, %v; want %d", i, len(list), err, i+2)
		}
	}
	if _, err := f.b.Read(ctx, storage.StrongConsistency, sealedResource("absent").GetId()); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("strong read of an absent sealed resource on the follower = %v, want ErrNotFound", err)
	}
}
