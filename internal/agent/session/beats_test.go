package session

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pbagent "trellis.dev/trellis/api/agent/v1"
)

// beatCounter is an AgentService that counts heartbeat calls, streams and
// the heartbeats on them. Every heartbeat of session "s1" is taken.
type beatCounter struct {
	pbagent.UnimplementedAgentServiceServer
	calls, streams, streamed atomic.Int64
}

func (b *beatCounter) answer(req *pbagent.HeartbeatRequest) (*pbagent.HeartbeatResponse, error) {
	if req.GetSession() != "s1" {
		return nil, status.Error(codes.FailedPrecondition, "unknown session")
	}
	return &pbagent.HeartbeatResponse{Ttl: durationpb.New(9 * time.Second)}, nil
}

func (b *beatCounter) Heartbeat(_ context.Context, req *pbagent.HeartbeatRequest) (*pbagent.HeartbeatResponse, error) {
	b.calls.Add(1)
	return b.answer(req)
}

func (b *beatCounter) HeartbeatStream(stream pbagent.AgentService_HeartbeatStreamServer) error {
	b.streams.Add(1)
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		b.streamed.Add(1)
		resp, err := b.answer(req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// beatSession is a session of an agent in session s1 on a server that
// serves svc alone.
func beatSession(t *testing.T, svc pbagent.AgentServiceServer) (*conn, context.Context) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pbagent.RegisterAgentServiceServer(gs, svc)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	s := &Session{cfg: Config{Name: "i-1", RPCTimeout: 5 * time.Second}, log: slog.New(slog.DiscardHandler), id: "s1"}
	s.ttl.Store(int64(10 * time.Second))
	c := &conn{s: s, addr: ln.Addr().String(), hb: pbagent.NewAgentServiceClient(cc)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); c.closeBeatStream() })
	return c, ctx
}

// Heartbeats travel on one stream per session, not as a call each; a
// refusal ends the stream, and the next heartbeat opens a new one.
func TestHeartbeatsShareOneStream(t *testing.T) {
	svc := &beatCounter{}
	s, ctx := beatSession(t, svc)
	for i := range 5 {
		resp, err := s.beat(ctx)
		if err != nil {
			t.Fatalf("heartbeat %d = %v", i, err)
		}
		if resp.GetTtl().AsDuration() != 9*time.Second {
			t.Fatalf("heartbeat %d = %v", i, resp)
		}
	}
	if n, c, m := svc.streams.Load(), svc.calls.Load(), svc.streamed.Load(); n != 1 || c != 0 || m != 5 {
		t.Fatalf("5 heartbeats: %d streams, %d calls, %d on streams; want all 5 on one stream", n, c, m)
	}
	s.s.id = "s2"
	if _, err := s.beat(ctx); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("heartbeat of an unknown session = %v, want FailedPrecondition", err)
	}
	s.s.id = "s1"
	if _, err := s.beat(ctx); err != nil {
		t.Fatalf("heartbeat after a refusal = %v", err)
	}
	if n := svc.streams.Load(); n != 2 {
		t.Fatalf("%d streams; want a new one after the refusal ended the first", n)
	}
}

// fakeBeats is a heartbeat stream whose answers the test sends: the
// server's side, as the agent sees it.
type fakeBeats struct {
	pbagent.AgentServiceClient // only HeartbeatStream is called
	grpc.ClientStream          // only Send and Recv are called
	streams                    int
	sent                       chan *pbagent.HeartbeatRequest
	answers                    chan *pbagent.HeartbeatResponse
	ctx                        context.Context
}

func (f *fakeBeats) HeartbeatStream(ctx context.Context, _ ...grpc.CallOption) (pbagent.AgentService_HeartbeatStreamClient, error) {
	f.streams++
	f.ctx = ctx
	return f, nil
}

func (f *fakeBeats) Send(req *pbagent.HeartbeatRequest) error {
	f.sent <- req
	return nil
}

func (f *fakeBeats) Recv() (*pbagent.HeartbeatResponse, error) {
	select {
	case a := <-f.answers:
		return a, nil
	case <-f.ctx.Done():
		return nil, status.FromContextError(f.ctx.Err()).Err()
	}
}

type bubbleClock struct{}

func (bubbleClock) Now() time.Time                         { return time.Now() }
func (bubbleClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// A slow answer leaves the stream open: the heartbeat stays with the
// server, its late answer counts as the instance heard alive, and it is
// never taken for the next heartbeat's answer.
func TestLateAnswerKeepsTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fb := &fakeBeats{sent: make(chan *pbagent.HeartbeatRequest, 8), answers: make(chan *pbagent.HeartbeatResponse)}
		s := &Session{cfg: Config{Name: "i-1"}, log: slog.New(slog.DiscardHandler), clock: bubbleClock{}, id: "s1"}
		c := &conn{s: s, hb: fb}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		defer c.closeBeatStream()
		req := &pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"}

		if _, err := c.beatOnStream(ctx, req, 2*time.Second); status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("unanswered heartbeat = %v, want DeadlineExceeded", err)
		}
		if !c.lastAnswered().IsZero() {
			t.Fatalf("lastAnswered before any answer = %v, want zero", c.lastAnswered())
		}
		time.Sleep(5 * time.Second) // the server takes 7 s in all
		fb.answers <- &pbagent.HeartbeatResponse{Leader: "first"}
		synctest.Wait()
		if got, want := c.lastAnswered(), time.Now(); !got.Equal(want) {
			t.Fatalf("lastAnswered after the late answer = %v, want %v", got, want)
		}

		// The second heartbeat waits for its own answer, not the first's.
		got := make(chan *pbagent.HeartbeatResponse, 1)
		go func() {
			resp, err := c.beatOnStream(ctx, req, time.Minute)
			if err != nil {
				t.Errorf("second heartbeat = %v", err)
			}
			got <- resp
		}()
		synctest.Wait()
		select {
		case resp := <-got:
			t.Fatalf("second heartbeat answered with %v before the server answered it", resp)
		default:
		}
		fb.answers <- &pbagent.HeartbeatResponse{Leader: "second"}
		if resp := <-got; resp.GetLeader() != "second" {
			t.Fatalf("second heartbeat's answer = %v, want the second answer", resp)
		}
		if fb.streams != 1 || len(fb.sent) != 2 {
			t.Fatalf("%d streams, %d heartbeats sent; want both heartbeats on the one stream kept across the slow answer", fb.streams, len(fb.sent))
		}
	})
}
