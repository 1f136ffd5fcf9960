package proxy

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	"trellis.dev/trellis/internal/ca"
)

// TestInboundGRPC: a grpc-go client calls a grpc-go app through the
// proxy (HTTP/2 over TLS with ALPN in, HTTP/2 without TLS to the app);
// the L7 permissions allow one method and deny another, which the client
// sees as PermissionDenied.
func TestInboundGRPC(t *testing.T) {
	now := time.Now()
	c := newTestCA(t, testTD, now)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sawXFCC []string
	app := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		sawXFCC = md.Get("x-forwarded-client-cert")
		mu.Unlock()
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(app, health.NewServer())
	go app.Serve(ln)
	t.Cleanup(app.Stop)

	snap := testSnapshot(t, c, "api", "grpc", ln.Addr().String())
	snap.Inbound.Intentions = &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Namespace: "default", Name: "web",
		Permissions: []*pbmesh.IntentionPermission{{Action: "allow", Http: &pbmesh.IntentionHTTPMatch{PathExact: "/grpc.health.v1.Health/Check"}}}}}}
	p := newTestProxy(t)
	addr := startInbound(t, p, snap)

	webLeaf, webKey := c.leaf(t, "default", "web", now, time.Hour)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(t, webLeaf, webKey, [][]byte{c.rootPEM()}, "h2"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Check through the proxy: %v", err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check: %v", resp.GetStatus())
	}
	mu.Lock()
	if want := XFCC(spiffeOf(testTD, "default", "api"), certHashOf(t, webLeaf), spiffeOf(testTD, "default", "web")); len(sawXFCC) != 1 || sawXFCC[0] != want {
		t.Errorf("the app saw X-Forwarded-Client-Cert %q, want %q", sawXFCC, want)
	}
	mu.Unlock()
	_, err = client.List(ctx, &healthpb.HealthListRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("List, which no permission allows: %v, want PermissionDenied", err)
	}
	if got := testutil.ToFloat64(p.Stats().IntentionDenials.WithLabelValues("default/web", "l7")); got != 1 {
		t.Errorf("l7 denials: %v, want 1", got)
	}
}

func certHashOf(t testing.TB, certPEM []byte) string {
	certs, err := ca.ParseCerts(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certHash(certs[0].Raw)
}
