package tasklogs

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/resource"
)

// A real gRPC server with the Hub's services, and a connection to it.
func startHub(t *testing.T) (*Hub, *grpc.ClientConn) {
	t.Helper()
	hub := NewHub()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The server's edge proves who calls (internal/server's
	// agentIdentity): here, the agent whose session is "s1".
	prove := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		if v := md.Get(resource.AgentSessionMetadataKey); len(v) == 1 && v[0] == "s1" {
			ss = provenStream{ss, resource.AsAgent(ss.Context(), md.Get(resource.AgentInstanceMetadataKey)[0])}
		}
		return handler(srv, ss)
	}
	srv := grpc.NewServer(grpc.StreamInterceptor(prove))
	pbagent.RegisterLogServiceServer(srv, logServer{hub: hub})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return hub, cc
}

type provenStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (p provenStream) Context() context.Context { return p.ctx }

type logServer struct {
	pbagent.UnimplementedLogServiceServer
	hub *Hub
}

func (s logServer) Attach(st pbagent.LogService_AttachServer) error     { return s.hub.Attach(st) }
func (s logServer) SendLogs(st pbagent.LogService_SendLogsServer) error { return s.hub.SendLogs(st) }

// until waits for cond, for at most 10 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// attach runs an agent's Serve for instance with open until the test
// ends; its result arrives on the channel.
func attach(t *testing.T, hub *Hub, cc *grpc.ClientConn, instance string, open OpenFunc) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		done <- Serve(ctx, cc, instance, "s1", open, slog.New(slog.DiscardHandler))
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	until(t, instance+" is attached", func() bool { return hub.Attached(instance) })
	return done
}

func request(instance, name string) *pbagent.LogRequest {
	return &pbagent.LogRequest{Instance: instance, Namespace: "default", Name: name, Container: "app", Stream: Stdout}
}

func readAll(t *testing.T, c Chunks) string {
	t.Helper()
	var b strings.Builder
	for {
		data, err := c.Next()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		b.Write(data)
	}
}

func TestHubReadsThroughTheAgent(t *testing.T) {
	hub, cc := startHub(t)
	big := strings.Repeat("x", 3*ChunkSize+17)
	attach(t, hub, cc, "i-1", func(_ context.Context, req *pbagent.LogRequest) (io.ReadCloser, error) {
		switch req.GetName() {
		case "t1":
			return io.NopCloser(strings.NewReader("hello\n")), nil
		case "big":
			return io.NopCloser(strings.NewReader(big)), nil
		case "pending":
			return nil, status.Error(codes.FailedPrecondition, "task default/pending has not started")
		}
		return nil, status.Errorf(codes.NotFound, "task default/%s is not on instance i-1", req.GetName())
	})
	ctx := context.Background()

	c, err := hub.Open(ctx, request("i-1", "t1"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, c); got != "hello\n" {
		t.Errorf("read %q", got)
	}
	c.Close()
	c, err = hub.Open(ctx, request("i-1", "big"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, c); got != big {
		t.Errorf("read %d bytes, want %d", len(got), len(big))
	}
	c.Close()

	for _, tt := range []struct {
		req  *pbagent.LogRequest
		code codes.Code
		msg  string
	}{
		{request("i-1", "nope"), codes.NotFound, "task default/nope is not on instance i-1"},
		{request("i-1", "pending"), codes.FailedPrecondition, "has not started"},
		{request("i-2", "t1"), codes.NotFound, "the agent of instance i-2 is not attached to this server"},
		{&pbagent.LogRequest{Instance: "i-1", Namespace: "default", Name: "t1", Container: "app", Stream: "stdin"}, codes.InvalidArgument, "stream"},
	} {
		_, err := hub.Open(ctx, tt.req)
		if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.msg) {
			t.Errorf("Open(%s): %v, want %s naming %q", tt.req.GetName(), err, tt.code, tt.msg)
		}
	}
	if IsNotAttached(nil) {
		t.Error("nil is not NOT_ATTACHED")
	}
	until(t, "no read is left pending", func() bool { return hub.Pending() == 0 })
}

// Following: output comes as it is written, and the reader's going away
// ends the read on the agent (its reader is closed).
func TestHubFollowEndsWithTheReader(t *testing.T) {
	hub, cc := startHub(t)
	pr, pw := io.Pipe()
	attach(t, hub, cc, "i-1", func(context.Context, *pbagent.LogRequest) (io.ReadCloser, error) { return pr, nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := request("i-1", "t1")
	req.Follow = true
	c, err := hub.Open(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = pw.Write([]byte("line 1\n")) }()
	if data, err := c.Next(); err != nil || string(data) != "line 1\n" {
		t.Fatalf("Next = %q, %v", data, err)
	}
	cancel()
	// The agent closed its end: a write fails.
	until(t, "the agent's reader is closed", func() bool {
		_, err := pw.Write([]byte("more\n"))
		return err == io.ErrClosedPipe
	})
	c.Close()
	until(t, "no read is left pending", func() bool { return hub.Pending() == 0 })
}

// An outsider's SendLogs answers no read: not one it names wrongly, not
// one it names at all.
func TestSendLogsRefusesWhatNoReadAsked(t *testing.T) {
	hub, cc := startHub(t)
	client := pbagent.NewLogServiceClient(cc)
	for _, tt := range []struct {
		first *pbagent.LogChunk
		code  codes.Code
	}{
		{&pbagent.LogChunk{RequestId: "0123456789abcdef0123456789abcdef", Data: []byte("DB_PASSWORD=forged")}, codes.NotFound},
		{&pbagent.LogChunk{Data: []byte("no id")}, codes.InvalidArgument},
	} {
		st, err := client.SendLogs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(tt.first); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CloseAndRecv(); status.Code(err) != tt.code {
			t.Errorf("SendLogs(%q): %v, want %s", tt.first.GetRequestId(), err, tt.code)
		}
	}
	// Attach takes only the instance's proven agent: not a caller that
	// proves nothing, not another instance's agent, not a bad name.
	for _, tt := range []struct {
		md       []string
		instance string
		code     codes.Code
		msg      string
	}{
		{nil, "i-1", codes.PermissionDenied, "the caller is proven to be no agent"},
		{[]string{resource.AgentInstanceMetadataKey, "i-1", resource.AgentSessionMetadataKey, "forged"}, "i-1", codes.PermissionDenied, "the caller is proven to be no agent"},
		{[]string{resource.AgentInstanceMetadataKey, "i-2", resource.AgentSessionMetadataKey, "s1"}, "i-1", codes.PermissionDenied, "the caller is the agent of instance i-2"},
		{[]string{resource.AgentInstanceMetadataKey, "i-1", resource.AgentSessionMetadataKey, "s1"}, "Not A Name", codes.InvalidArgument, "instance"},
	} {
		st, err := client.Attach(metadata.AppendToOutgoingContext(context.Background(), tt.md...))
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&pbagent.AttachRequest{Instance: tt.instance})
		if _, err := st.Recv(); status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("Attach(%s) with %v: %v, want %s naming %q", tt.instance, tt.md, err, tt.code, tt.msg)
		}
	}
	if hub.Attached("i-1") {
		t.Error("a refused Attach left a link")
	}
	if hub.Pending() != 0 {
		t.Errorf("%d reads pending", hub.Pending())
	}
}

// A newer link of the instance replaces the older, which ends; an agent
// that takes a request and never answers is given up on.
func TestHubLinks(t *testing.T) {
	hub, cc := startHub(t)
	hub.AnswerTimeout = 100 * time.Millisecond
	first := attach(t, hub, cc, "i-1", func(context.Context, *pbagent.LogRequest) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("old\n")), nil
	})
	// A second agent process of i-1, attached by hand: it never answers.
	st, err := pbagent.NewLogServiceClient(cc).Attach(metadata.AppendToOutgoingContext(context.Background(),
		resource.AgentInstanceMetadataKey, "i-1", resource.AgentSessionMetadataKey, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pbagent.AttachRequest{Instance: "i-1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-first:
		if status.Code(err) != codes.Aborted {
			t.Errorf("the replaced link ended with %v, want ABORTED", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the replaced link did not end")
	}
	_, err = hub.Open(context.Background(), request("i-1", "t1"))
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("Open through a silent agent: %v, want UNAVAILABLE", err)
	}
	if got, err := st.Recv(); err != nil || got.GetName() != "t1" || got.GetId() == "" {
		t.Errorf("the silent agent got %v, %v", got, err)
	}
	until(t, "no read is left pending", func() bool { return hub.Pending() == 0 })
}
