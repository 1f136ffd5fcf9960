package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"trellis.dev/trellis/internal/acl"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

var (
	panicType  = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Panic"}
	nsType     = core.NamespaceType
	namespaces = wire.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}
)

// running is a server started on free loopback ports.
type running struct {
	srv  *server.Server
	done chan error
	stop context.CancelFunc
	http *client.Client
	grpc pbresource.ResourceServiceClient
	// tokens receives the token of each request the service authorizes
	// (while there is room).
	tokens chan string
}

func start(t *testing.T) *running {
	t.Helper()
	// The core and a type whose Validate hook panics; nothing else.
	panicking := typesModule{name: "panicking", register: func(reg *resource.Registry) {
		reg.Register(resource.Registration{Type: panicType, Proto: &pbcore.Namespace{}, Scope: resource.ScopeCluster,
			Validate: func(*pbresource.Resource) error { panic("validate bug") }})
	}}
	tokens := make(chan string, 10)
	authorize := func(ctx context.Context) (acl.Authorizer, error) {
		// Background callers (the bootstrapper, controllers) carry no
		// token; only requests that present one are recorded.
		if tok := resource.TokenFromContext(ctx); tok != "" {
			tokens <- tok
		}
		return acl.AllowAll{}, nil
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702",
		Modules: []module.Module{core.Module(), panicking}, Authorize: authorize, ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, done: make(chan error, 1), stop: cancel, tokens: tokens}
	go func() { r.done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	r.http, err = client.New("http://" + srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	r.grpc = pbresource.NewResourceServiceClient(conn)
	// The HTTP API opens once the server is bootstrapped; gRPC serves from
	// the start, so tests that use it wait for this.
	if err := r.http.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *running) shutdown(t *testing.T) {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		r.done <- nil // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop")
	}
}

func TestServerServesHTTPAndGRPC(t *testing.T) {
	r := start(t)
	ctx := context.Background()

	// The default namespace is there as soon as the API answers.
	if _, err := r.http.Read(ctx, client.Ref{Type: namespaces, Name: "default"}, false); err != nil {
		t.Fatalf("default namespace: %v", err)
	}
	// Written over HTTP, read over gRPC, and the other way round.
	if _, err := r.http.Write(ctx, client.Ref{Type: namespaces, Name: "web"}, wire.WriteRequest{Data: []byte(`{"description":"w"}`)}); err != nil {
		t.Fatal(err)
	}
	got, err := r.grpc.Read(ctx, &pbresource.ReadRequest{Id: core.NamespaceID("web")})
	if err != nil {
		t.Fatal(err)
	}
	var ns pbcore.Namespace
	if err := got.GetResource().GetData().UnmarshalTo(&ns); err != nil || ns.GetDescription() != "w" {
		t.Fatalf("gRPC read %v (%v)", got, err)
	}
	data, _ := anypb.New(&pbcore.Namespace{Description: "from grpc"})
	if _, err := r.grpc.Write(ctx, &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: core.NamespaceID("db"), Data: data}}); err != nil {
		t.Fatal(err)
	}
	res, err := r.http.Read(ctx, client.Ref{Type: namespaces, Name: "db"}, true)
	if err != nil || string(res.Data) != `{"description":"from grpc"}` {
		t.Fatalf("HTTP read %+v (%v)", res, err)
	}

	// Status and metrics of the process.
	if leader, err := r.http.Leader(ctx); err != nil || leader != "127.0.0.1:7702" {
		t.Fatalf("leader %q (%v)", leader, err)
	}
	if peers, err := r.http.Peers(ctx); err != nil || len(peers) != 1 {
		t.Fatalf("peers %v (%v)", peers, err)
	}
	if err := r.http.Health(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + r.srv.HTTPAddr() + "/v1/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"go_goroutines", "process_resident_memory_bytes", "trellis_http_requests_total"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestGRPCPanicIsInternal(t *testing.T) {
	r := start(t)
	data, _ := anypb.New(&pbcore.Namespace{})
	_, err := r.grpc.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{
		Id: &pbresource.ID{Type: panicType, Name: "x"}, Data: data}})
	if status.Code(err) != codes.Internal {
		t.Fatalf("Write = %v, want Internal", err)
	}
	// Still serving.
	if _, err := r.grpc.Read(context.Background(), &pbresource.ReadRequest{Id: core.NamespaceID("default")}); err != nil {
		t.Fatal(err)
	}
}

func TestTokenReachesTheService(t *testing.T) {
	r := start(t)
	awaitToken := func(want string) {
		t.Helper()
		if tok := <-r.tokens; tok != want {
			t.Fatalf("authorized token %q, want %q", tok, want)
		}
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), resource.TokenMetadataKey, "grpc-secret")
	if _, err := r.grpc.Read(ctx, &pbresource.ReadRequest{Id: core.NamespaceID("default")}); err != nil {
		t.Fatal(err)
	}
	awaitToken("grpc-secret")
	hc, _ := client.New("http://"+r.srv.HTTPAddr(), client.WithToken("http-secret"))
	if _, err := hc.Read(context.Background(), client.Ref{Type: namespaces, Name: "default"}, false); err != nil {
		t.Fatal(err)
	}
	awaitToken("http-secret")
}

// Shutdown ends open watches on both faces with a retryable error instead
// of waiting on them, and Start returns cleanly.
func TestShutdownEndsWatches(t *testing.T) {
	r := start(t)
	ctx := context.Background()
	hw, err := r.http.Watch(ctx, namespaces, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer hw.Close()
	gw, err := r.grpc.WatchList(ctx, &pbresource.WatchListRequest{Type: nsType})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the default namespace, then the snapshot's end
		if _, err := hw.Next(); err != nil {
			t.Fatal(err)
		}
		if _, err := gw.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	r.shutdown(t)
	if _, err := hw.Next(); !client.IsCode(err, wire.CodeUnavailable) {
		t.Fatalf("HTTP watch after shutdown: %v", err)
	}
	if _, err := gw.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("gRPC watch after shutdown: %v", err)
	}
}

func TestPortInUse(t *testing.T) {
	r := start(t)
	_, err := server.New(server.Config{HTTPAddr: r.srv.HTTPAddr(), GRPCAddr: "127.0.0.1:0"})
	if err == nil || !strings.HasPrefix(err.Error(), "-http-addr:") {
		t.Fatalf("New on a used port = %v", err)
	}
}
