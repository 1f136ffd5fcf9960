package server_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbca "trellis.dev/trellis/api/ca/v1"
	pbcluster "trellis.dev/trellis/api/cluster/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"

	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
)

// reflect asks a server's reflection service one question, as grpcurl
// does, on one ServerReflectionInfo stream.
func reflect(t *testing.T, conn *grpc.ClientConn, req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if e := resp.GetErrorResponse(); e != nil {
		t.Fatalf("reflection answered %d: %s", e.GetErrorCode(), e.GetErrorMessage())
	}
	return resp
}

func listServices(t *testing.T, conn *grpc.ClientConn) []string {
	t.Helper()
	resp := reflect(t, conn, &rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_ListServices{ListServices: ""},
	})
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	slices.Sort(names)
	return names
}

// describe returns the file descriptor that defines symbol, and fails the
// test unless the server can describe it.
func describe(t *testing.T, conn *grpc.ClientConn, symbol string) *descriptorpb.FileDescriptorProto {
	t.Helper()
	resp := reflect(t, conn, &rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol},
	})
	files := resp.GetFileDescriptorResponse().GetFileDescriptorProto()
	if len(files) == 0 {
		t.Fatalf("no file descriptor for %s", symbol)
	}
	// The first file is the one that defines the symbol; the rest are its
	// dependencies.
	fd := &descriptorpb.FileDescriptorProto{}
	if err := proto.Unmarshal(files[0], fd); err != nil {
		t.Fatal(err)
	}
	return fd
}

func methodsOf(fd *descriptorpb.FileDescriptorProto, service string) []string {
	for _, s := range fd.GetService() {
		if fmt.Sprintf("%s.%s", fd.GetPackage(), s.GetName()) == service {
			var names []string
			for _, m := range s.GetMethod() {
				names = append(names, m.GetName())
			}
			return names
		}
	}
	return nil
}

// An in-memory server (what trellis dev runs) answers gRPC reflection:
// grpcurl can list its services and describe their methods and the
// resource types a request carries in its Any.
func TestReflectionListsServices(t *testing.T) {
	// The default registry, as trellis dev has: the orchestrator's types
	// bring the AgentService, the CA's the CAService.
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702", ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	conn := dialGRPC(t, srv.GRPCAddr())

	got := listServices(t, conn)
	want := []string{
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
		"trellis.agent.v1.AgentService",
		"trellis.agent.v1.LogService",
		"trellis.ca.v1.CAService",
		"trellis.resource.v1.ResourceService",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("services = %q, want %q", got, want)
	}

	methods := methodsOf(describe(t, conn, "trellis.resource.v1.ResourceService"), "trellis.resource.v1.ResourceService")
	for _, m := range []string{"Read", "Write", "WriteBatch", "WriteStatus", "List", "ListByOwner", "Delete", "WatchList"} {
		if !slices.Contains(methods, m) {
			t.Errorf("ResourceService methods = %q, missing %s", methods, m)
		}
	}
	// A resource's data is an Any: a client decodes it only if the server
	// can describe the type named in it.
	for _, msg := range []string{"trellis.core.v1.Namespace", "trellis.orchestrator.v1.Task", "trellis.scheduler.v1.Environment"} {
		if fd := describe(t, conn, msg); fd.GetPackage() == "" {
			t.Errorf("%s: file %s has no package", msg, fd.GetName())
		}
	}
}

// A Raft server serves the services servers use between themselves
// (forwarding, which skips validation and ACL hooks; membership; forwarded
// heartbeats; the CA's federation, which signs secondaries' intermediates)
// on its server-to-server port only: the public port neither lists nor
// serves them, and the public services hold none of their methods.
func TestServerServicesOnlyOnServerPort(t *testing.T) {
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), ServerAddr: "127.0.0.1:0",
		Raft:            &server.RaftConfig{DataDir: t.TempDir(), BootstrapExpect: 1, SingleServer: true},
		ShutdownTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	public := dialGRPC(t, srv.GRPCAddr())
	peer := dialGRPC(t, srv.ServerAddr())

	got := listServices(t, public)
	for _, s := range []string{"trellis.resource.v1.ResourceService", "trellis.agent.v1.AgentService"} {
		if !slices.Contains(got, s) {
			t.Errorf("public services = %q, missing %s", got, s)
		}
	}
	for _, s := range []string{"trellis.cluster.v1.Cluster", "trellis.storage.v1.Forwarding", "trellis.agent.v1.HeartbeatForwarding", "trellis.ca.v1.CAFederation"} {
		if slices.Contains(got, s) {
			t.Errorf("public services = %q, include %s", got, s)
		}
	}
	// Split by caller: the agents' services hold nothing a server calls.
	for svc, want := range map[string][]string{
		"trellis.agent.v1.AgentService": {"Register", "Heartbeat", "HeartbeatStream", "WatchTasks"},
		"trellis.ca.v1.CAService":       {"Sign"},
	} {
		if got := methodsOf(describe(t, public, svc), svc); !slices.Equal(got, want) {
			t.Errorf("%s methods = %q, want %q", svc, got, want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := map[string]func(*grpc.ClientConn) error{
		"Forwarding.Apply": func(c *grpc.ClientConn) error {
			_, err := pbstorage.NewForwardingClient(c).Apply(ctx, &pbstorage.ApplyRequest{})
			return err
		},
		"Cluster.Info": func(c *grpc.ClientConn) error {
			_, err := pbcluster.NewClusterClient(c).Info(ctx, &pbcluster.InfoRequest{})
			return err
		},
		"HeartbeatForwarding.ForwardHeartbeats": func(c *grpc.ClientConn) error {
			_, err := pbagent.NewHeartbeatForwardingClient(c).ForwardHeartbeats(ctx, &pbagent.ForwardHeartbeatsRequest{})
			return err
		},
		"CAFederation.SignIntermediate": func(c *grpc.ClientConn) error {
			_, err := pbca.NewCAFederationClient(c).SignIntermediate(ctx, &pbca.SignIntermediateRequest{Datacenter: "evil"})
			return err
		},
		"CAFederation.Roots": func(c *grpc.ClientConn) error {
			_, err := pbca.NewCAFederationClient(c).Roots(ctx, &pbca.FederationRootsRequest{})
			return err
		},
	}
	for name, call := range calls {
		if err := call(public); status.Code(err) != codes.Unimplemented {
			t.Errorf("%s on the public port = %v, want Unimplemented", name, err)
		}
		// On the server port the service answers: an empty request
		// is refused on its merits, or served, never Unimplemented.
		if err := call(peer); status.Code(err) == codes.Unimplemented {
			t.Errorf("%s on the server port = %v, want it served", name, err)
		}
	}
}
