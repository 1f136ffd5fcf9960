package heartbeat_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
)

// A heartbeat stream answers every heartbeat as Heartbeat would, in order,
// on the leader and through a follower; a refusal ends the stream with
// Heartbeat's status, reason included.
func TestHeartbeatStreamAnswersAsHeartbeatWould(t *testing.T) {
	clients, leaderAddr := leaderAndFollower(t)
	for name, c := range clients {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := c.HeartbeatStream(ctx)
		if err != nil {
			t.Fatalf("%s: HeartbeatStream = %v", name, err)
		}
		for i := range 3 {
			if err := stream.Send(&pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"}); err != nil {
				t.Fatalf("%s: Send %d = %v", name, i, err)
			}
			resp, err := stream.Recv()
			if err != nil {
				t.Fatalf("%s: heartbeat %d = %v", name, i, err)
			}
			if resp.GetTtl().AsDuration() != testTTL || resp.GetLeader() != leaderAddr {
				t.Fatalf("%s: heartbeat %d = %v, want ttl %s and leader %s", name, i, resp, testTTL, leaderAddr)
			}
		}
		if err := stream.Send(&pbagent.HeartbeatRequest{Instance: "i-1", Session: "old"}); err != nil {
			t.Fatalf("%s: Send = %v", name, err)
		}
		_, err = stream.Recv()
		if status.Code(err) != codes.FailedPrecondition || heartbeat.ReasonOf(err) != heartbeat.ReasonSessionMismatch {
			t.Fatalf("%s: stale session on the stream = %v, want FailedPrecondition %s", name, err, heartbeat.ReasonSessionMismatch)
		}
		cancel()
	}
}

// A malformed heartbeat ends the stream with InvalidArgument; the server
// goes on serving other streams.
func TestHeartbeatStreamRefusesBadHeartbeats(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.register("i-1", "s1", "ready")
	client, _ := serve(t, heartbeat.ServiceConfig{Tracker: e.tracker})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, req := range []*pbagent.HeartbeatRequest{{Instance: "Not_A_Label", Session: "s1"}, {Instance: "i-1"}} {
		stream, err := client.HeartbeatStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("heartbeat %v = %v, want InvalidArgument", req, err)
		}
	}
	stream, err := client.HeartbeatStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Errorf("a good heartbeat after bad ones = %v", err)
	}
}
