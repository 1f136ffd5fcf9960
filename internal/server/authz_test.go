package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	pborch "trellis.dev/trellis/api/orchestrator/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbca "trellis.dev/trellis/api/ca/v1"
	pbcluster "trellis.dev/trellis/api/cluster/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
)

// newRaftServer builds a single-server Raft cluster with the default
// types, which serves every gRPC service a server has.
func newRaftServer(t *testing.T, authorize func(context.Context) (acl.Authorizer, error)) *server.Server {
	t.Helper()
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		Raft:            &server.RaftConfig{DataDir: t.TempDir(), BootstrapExpect: 1, SingleServer: true},
		Authorize:       authorize,
		ShutdownTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// Every method a server serves, in memory or on Raft, declares a
// permission, and the table names no method that nothing serves.
func TestEveryGRPCMethodDeclaresAPermission(t *testing.T) {
	mem, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702", ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, mem)
	raft := newRaftServer(t, nil)
	runServer(t, raft)

	served := map[string]bool{}
	declared := map[string]bool{}
	for _, srv := range []*server.Server{mem, raft} {
		// Each server's table holds its own methods and its modules'.
		perms := srv.MethodPermissions()
		for m := range perms {
			declared[m] = true
		}
		grpcs := []*grpc.Server{srv.GRPC()}
		if g := srv.ServerGRPC(); g != nil {
			grpcs = append(grpcs, g)
		}
		for _, g := range grpcs {
			for svc, info := range g.GetServiceInfo() {
				for _, m := range info.Methods {
					full := "/" + svc + "/" + m.Name
					served[full] = true
					if p, ok := perms[full]; !ok || !p.Declared() {
						t.Errorf("%s declares no permission", full)
					}
				}
			}
		}
	}
	for m := range declared {
		if !served[m] {
			t.Errorf("the table declares %s, which no server serves", m)
		}
	}
	if len(served) < 20 {
		t.Fatalf("only %d methods served: the servers are not fully built", len(served))
	}
}

// With an authorizer that refuses every token, one method of each service
// is refused with PermissionDenied naming the permission, and nothing
// changes; reflection stays public. Callers without a token (the server's
// own bootstrapper and controllers) are allowed, so the server comes up.
func TestDenyAllRefusesEveryService(t *testing.T) {
	authorize := func(ctx context.Context) (acl.Authorizer, error) {
		if resource.TokenFromContext(ctx) == "" {
			return acl.AllowAll{}, nil
		}
		return acl.DenyAll{}, nil
	}
	srv := newRaftServer(t, authorize)
	runServer(t, srv)
	conn := dialGRPC(t, srv.GRPCAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Wait until the server leads and has bootstrapped "default".
	res := pbresource.NewResourceServiceClient(conn)
	eventually(t, 30*time.Second, "the default namespace", func() bool {
		_, err := res.Read(ctx, &pbresource.ReadRequest{Id: &pbresource.ID{Type: core.NamespaceType, Name: "default"}})
		return err == nil
	})
	denied := metadata.AppendToOutgoingContext(ctx, resource.TokenMetadataKey, "nope")

	agent := pbagent.NewAgentServiceClient(conn)
	// Forwarding and Cluster are served on the server-to-server port only.
	serverConn := dialGRPC(t, srv.ServerAddr())
	fwd := pbstorage.NewForwardingClient(serverConn)
	cl := pbcluster.NewClusterClient(serverConn)
	calls := []struct {
		method string
		need   string
		call   func() error
	}{
		{"ResourceService.Write", "permission denied", func() error {
			ns, err := core.NewNamespace("team-a", "")
			if err != nil {
				return err
			}
			_, err = res.Write(denied, &pbresource.WriteRequest{Resource: ns})
			return err
		}},
		{"AgentService.Heartbeat", "needs agent", func() error {
			_, err := agent.Heartbeat(denied, &pbagent.HeartbeatRequest{Instance: "i-1", Session: "s"})
			return err
		}},
		{"AgentService.Register", "needs agent", func() error {
			_, err := agent.Register(denied, &pbagent.RegisterRequest{Instance: "i-1", Registration: &pborch.AgentRegistration{Session: "s"}})
			return err
		}},
		{"AgentService.WatchTasks", "needs agent", func() error {
			st, err := agent.WatchTasks(denied, &pbagent.WatchTasksRequest{Instance: "i-1"})
			if err != nil {
				return err
			}
			_, err = st.Recv()
			return err
		}},
		{"HeartbeatForwarding.ForwardHeartbeats", "needs server", func() error {
			_, err := pbagent.NewHeartbeatForwardingClient(serverConn).ForwardHeartbeats(denied, &pbagent.ForwardHeartbeatsRequest{})
			return err
		}},
		{"CAFederation.SignIntermediate", "needs server", func() error {
			_, err := pbca.NewCAFederationClient(serverConn).SignIntermediate(denied, &pbca.SignIntermediateRequest{Datacenter: "evil"})
			return err
		}},
		{"Forwarding.Apply", "needs server", func() error {
			_, err := fwd.Apply(denied, &pbstorage.ApplyRequest{})
			return err
		}},
		{"Cluster.RemovePeer", "needs server", func() error {
			_, err := cl.RemovePeer(denied, &pbcluster.RemovePeerRequest{IdOrAddress: srv.RaftAddr()})
			return err
		}},
	}
	for _, c := range calls {
		err := c.call()
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), c.need) {
			t.Errorf("%s: err = %v, want PermissionDenied naming %q", c.method, err, c.need)
		}
	}
	// Nothing changed: no namespace written, the server is still a peer.
	if _, err := res.Read(ctx, &pbresource.ReadRequest{Id: &pbresource.ID{Type: core.NamespaceType, Name: "team-a"}}); status.Code(err) != codes.NotFound {
		t.Errorf("team-a after a refused write: %v", err)
	}
	hc, err := client.New("http://" + srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	if peers, err := hc.RaftPeers(ctx); err != nil || len(peers) != 1 {
		t.Errorf("peers after a refused RemovePeer: %+v, %v", peers, err)
	}
	// Reflection needs nothing.
	if got := listServices(t, grpcWithToken(t, srv.GRPCAddr(), "nope")); !slices.Contains(got, "trellis.resource.v1.ResourceService") {
		t.Errorf("reflection with a refused token lists %q", got)
	}
}

// grpcWithToken dials addr sending token with every call.
func grpcWithToken(t *testing.T, addr, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, resource.TokenMetadataKey, token), desc, cc, method, opts...)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
