package server_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbcluster "trellis.dev/trellis/api/cluster/v1"
	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
	"trellis.dev/trellis/internal/tlsutil"
)

// tlsCluster forms a three-server cluster whose servers hold server
// certificates of one CA, and returns them with that CA's material.
func tlsCluster(t *testing.T) ([]*server.Server, *tlsutil.DevBundle) {
	t.Helper()
	b, err := tlsutil.NewDevBundle("", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	servers := raftClusterTLS(t, 0, func(int) *tlsutil.Configurator {
		c, err := tlsutil.NewFromBundle(b)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	return servers, b
}

// dialTLS dials a public gRPC port over TLS as an agent given the
// cluster's CA does.
func dialTLS(t *testing.T, addr string, b *tlsutil.DevBundle) *grpc.ClientConn {
	t.Helper()
	c, err := tlsutil.NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(c.OutgoingClientConfig())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// With TLS files, the servers form a cluster over mutual TLS (Raft and
// the server-to-server port), elect a leader, replicate, and a write
// through a follower is forwarded to the leader. The public gRPC port
// and the HTTPS port serve TLS; plaintext gRPC is refused.
func TestTLSClusterFormsAndReplicates(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a three-server Raft cluster")
	}
	servers, b := tlsCluster(t)
	leader := leaderOf(t, servers)
	var follower *server.Server
	for _, s := range servers {
		if s != leader {
			follower = s
		}
	}
	data, err := anypb.New(&pbcore.Namespace{})
	if err != nil {
		t.Fatal(err)
	}
	c := pbresource.NewResourceServiceClient(dialTLS(t, follower.GRPCAddr(), b))
	waitDefaultNamespace(t, c)
	if _, err := c.Write(context.Background(), &pbresource.WriteRequest{Resource: &pbresource.Resource{Id: core.NamespaceID("over-tls"), Data: data}}); err != nil {
		t.Fatalf("write through a follower: %v", err)
	}
	for _, s := range servers {
		rc := pbresource.NewResourceServiceClient(dialTLS(t, s.GRPCAddr(), b))
		eventually(t, 30*time.Second, "the write replicated to "+s.RaftAddr(), func() bool {
			_, err := rc.Read(context.Background(), &pbresource.ReadRequest{Id: core.NamespaceID("over-tls")})
			return err == nil
		})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	plain := pbresource.NewResourceServiceClient(dialGRPC(t, follower.GRPCAddr()))
	if _, err := plain.Read(ctx, &pbresource.ReadRequest{Id: core.NamespaceID("over-tls")}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext read on the public port = %v, want Unavailable (no TLS, no connection)", err)
	}
	tc, err := tlsutil.NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := client.New("https://"+follower.HTTPSAddr(), client.WithHTTPClient(&http.Client{
		Transport: &http.Transport{TLSClientConfig: tc.OutgoingClientConfig()},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := hc.Health(ctx); err != nil {
		t.Errorf("health over HTTPS: %v", err)
	}
}

// The server-to-server port and the Raft port accept a server of the
// cluster's CA, and refuse a peer with only a client certificate of the
// same CA, one with a server certificate of another CA, one with none,
// and plaintext.
func TestServerPortsRefuseAllButServersOfTheCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a three-server Raft cluster")
	}
	servers, b := tlsCluster(t)
	leaderOf(t, servers)
	srv := servers[0]
	other, err := tlsutil.NewDevBundle("", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	cert := func(kp *tlsutil.KeyPair) []tls.Certificate {
		return []tls.Certificate{{Certificate: [][]byte{kp.Cert.Raw}, PrivateKey: kp.Key, Leaf: kp.Cert}}
	}
	// Peers that present what they hold and verify nothing: the refusal
	// must come from the server.
	peers := []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"a server of the cluster", cert(b.Server), true},
		{"a client of the cluster", cert(b.Client), false},
		{"a server of another CA", cert(other.Server), false},
		{"no certificate", nil, false},
	}
	// Raft's accepting a server is what the cluster formed by: only the
	// refusals are checked there (a Raft server never speaks first).
	for _, port := range []struct{ name, addr string }{{"server-to-server", srv.ServerAddr()}, {"raft", srv.RaftAddr()}} {
		for _, p := range peers {
			if p.ok && port.name == "raft" {
				continue
			}
			// h2: gRPC closes a TLS connection that did not negotiate it.
			cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: p.certs, NextProtos: []string{"h2"}}
			err := tlsExchange(port.addr, cfg)
			if p.ok && err != nil {
				t.Errorf("%s port, %s: %v, want accepted", port.name, p.name, err)
			}
			if !p.ok && err == nil {
				t.Errorf("%s port, %s: accepted, want refused", port.name, p.name)
			}
		}
	}

	// A gRPC client with the cluster's client certificate is refused by
	// the server-to-server port; one with its server certificate is
	// served; a plaintext one is refused.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(srv.ServerAddr(), grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = pbcluster.NewClusterClient(conn).Info(ctx, &pbcluster.InfoRequest{})
		return err
	}
	if err := info(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, Certificates: cert(b.Client)})); err == nil {
		t.Error("Cluster.Info with a client certificate was served")
	}
	serverCfg, err := tlsutil.NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := serverCfg.OutgoingServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := info(credentials.NewTLS(out)); err != nil {
		t.Errorf("Cluster.Info as a server of the cluster: %v", err)
	}
}

// tlsExchange handshakes with addr and reads one byte, which carries the
// server's verdict: in TLS 1.3 the server checks the client's certificate
// after the client's handshake has ended, so a refused client learns of
// it at its first read (an alert), and an accepted one of the gRPC port
// reads the server's HTTP/2 settings. The deadline only guards against a
// hung test: a server that neither refuses nor speaks fails the check.
func tlsExchange(addr string, cfg *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil // kept open without a word: not refused
	}
	return err
}

// trellis dev -data-dir: certificates made in memory on the
// server-to-server port, the public ports plaintext, which it says, and
// no warning of plaintext server links.
func TestDevTLSOnTheServerPortOnly(t *testing.T) {
	b, err := tlsutil.NewDevBundle("", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tlsutil.NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), ServerAddr: "127.0.0.1:0",
		Raft: &server.RaftConfig{DataDir: t.TempDir(), BootstrapExpect: 1, SingleServer: true},
		TLS:  tc, PublicPlaintext: true, ShutdownTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	waitDefaultNamespace(t, pbresource.NewResourceServiceClient(dialGRPC(t, srv.GRPCAddr())))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pbcluster.NewClusterClient(dialGRPC(t, srv.ServerAddr())).Info(ctx, &pbcluster.InfoRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext Cluster.Info on the server port = %v, want Unavailable", err)
	}
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h wire.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if h.Status != "ok" || slices.Contains(h.Warnings, server.WarnPlaintext) {
		t.Errorf("health = %+v, want ok without the warning of plaintext server links", h)
	}
	// The public ports are plaintext, on loopback, and said to be.
	for _, port := range []string{"the HTTP API on " + srv.HTTPAddr() + " is plaintext, on loopback", "the public gRPC API on " + srv.GRPCAddr() + " is plaintext, on loopback"} {
		if !slices.ContainsFunc(h.Warnings, func(w string) bool { return strings.HasPrefix(w, port) }) {
			t.Errorf("health warnings %q; want one saying %q", h.Warnings, port)
		}
	}
}
