package resource_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// TestGRPC runs the service behind a real gRPC server on loopback and uses
// it through the generated client: the token travels as metadata to the
// authorizer, errors keep their codes and messages, and WatchList streams.
func TestGRPC(t *testing.T) {
	p := &policy{deny: map[string]bool{"secret": true}}
	var (
		mu     sync.Mutex
		tokens = map[string]int{}
	)
	h := newHarness(t, withAuthorize(func(ctx context.Context) (acl.Authorizer, error) {
		mu.Lock()
		tokens[resource.TokenFromContext(ctx)]++
		mu.Unlock()
		return p, nil
	}))
	h.createNamespace("secret")
	mu.Lock()
	clear(tokens) // count the gRPC calls only
	mu.Unlock()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Who a caller is comes from the server's edge, never the request: this
	// one takes every caller for the owner of Widget's status key, as the
	// server's edge does for a proven agent (resource.AsAgent).
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(resource.AsController(ctx, progressController), req)
	}))
	pbresource.RegisterResourceServiceServer(srv, h.svc.GRPC())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := pbresource.NewResourceServiceClient(conn)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, resource.TokenMetadataKey, "grpc-token")

	// Watch first, so the writes below show up on the stream.
	stream, err := client.WatchList(ctx, &pbresource.WatchListRequest{Type: widgetType})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := stream.Recv(); err != nil || ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
		t.Fatalf("first event %v, %v; want END_OF_SNAPSHOT of an empty type", ev, err)
	}

	wrote, err := client.Write(ctx, &pbresource.WriteRequest{Resource: widget(t, "", "web", "v1")})
	if err != nil {
		t.Fatal(err)
	}
	read, err := client.Read(ctx, &pbresource.ReadRequest{Id: widgetID("", "web"), Consistent: true})
	if err != nil || !proto.Equal(read.GetResource(), wrote.GetResource()) {
		t.Fatalf("read back %v, %v", read, err)
	}
	ev, err := stream.Recv()
	if err != nil || ev.GetOp() != pbresource.WatchEvent_OP_UPSERT || !proto.Equal(ev.GetResource(), wrote.GetResource()) {
		t.Fatalf("watch event %v, %v", ev, err)
	}

	// The other RPCs, once each.
	if _, err := client.WriteStatus(ctx, &pbresource.WriteStatusRequest{Id: wrote.GetResource().GetId(), Key: "ctrl", Status: &pbresource.Status{ObservedGeneration: 1}}); err != nil {
		t.Fatal(err)
	}
	statuses, err := client.WriteStatuses(ctx, &pbresource.WriteStatusesRequest{Statuses: []*pbresource.WriteStatusRequest{
		progress(t, wrote.GetResource().GetId(), "", 5), progress(t, widgetID("", "nope"), "", 1),
	}})
	if err != nil || progressOf(t, statuses.GetResults()[0].GetResource()) != 5 || codes.Code(statuses.GetResults()[1].GetError().GetCode()) != codes.NotFound {
		t.Fatalf("write statuses: %v, %v", statuses, err)
	}
	batch, err := client.WriteBatch(ctx, &pbresource.WriteBatchRequest{Resources: batchOf(t, "", 3, "v")})
	if err != nil || len(batch.GetResources()) != 3 {
		t.Fatalf("batch: %v, %v", batch, err)
	}
	list, err := client.List(ctx, &pbresource.ListRequest{Type: widgetType})
	if err != nil || len(list.GetResources()) != 4 {
		t.Fatalf("list: %v, %v", list, err)
	}
	if _, err := client.ListByOwner(ctx, &pbresource.ListByOwnerRequest{Owner: wrote.GetResource().GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Delete(ctx, &pbresource.DeleteRequest{Id: widgetID("", "task-0000")}); err != nil {
		t.Fatal(err)
	}

	// Errors cross the wire with their code and field.
	_, err = client.Write(ctx, &pbresource.WriteRequest{Resource: widget(t, "", "Foo_1", "v")})
	requireCode(t, err, codes.InvalidArgument, `id.name: "Foo_1" is not a valid name: must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)`)
	before := h.state()
	_, err = client.Write(ctx, &pbresource.WriteRequest{Resource: widget(t, "secret", "w", "v")})
	requireCode(t, err, codes.PermissionDenied, "write demo/v1/Widget/secret/w")
	h.requireUnchanged(before)
	if !p.asked("namespace:write:secret") {
		t.Fatal("the authorizer was not asked")
	}
	denied, err := client.WatchList(ctx, &pbresource.WatchListRequest{Type: widgetType, Tenancy: &pbresource.Tenancy{Namespace: "secret"}})
	if err == nil {
		_, err = denied.Recv() // a server stream reports its error on Recv
	}
	requireCode(t, err, codes.PermissionDenied, "list demo/v1/Widget in namespace secret")

	// Every call, stream included, reached Authorize with the metadata token.
	mu.Lock()
	defer mu.Unlock()
	if len(tokens) != 1 || tokens["grpc-token"] != 12 {
		t.Fatalf("Authorize saw tokens %v, want only grpc-token on every call", tokens)
	}
}
