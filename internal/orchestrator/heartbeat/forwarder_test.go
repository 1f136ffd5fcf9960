package heartbeat_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/orchestrator/heartbeat"
)

// calls counts the unary calls a server received, by method.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[info.FullMethod]++
	c.mu.Unlock()
	return handler(ctx, req)
}

func (c *calls) count(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

// heartbeatAll sends every request through client at once and returns
// the answers, by request. A heartbeat not answered within answerLimit
// fails with DeadlineExceeded, so that a test waiting on a batch that
// never leaves fails instead of hanging.
func heartbeatAll(client pbagent.AgentServiceClient, reqs []*pbagent.HeartbeatRequest) ([]*pbagent.HeartbeatResponse, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), answerLimit)
	defer cancel()
	resps := make([]*pbagent.HeartbeatResponse, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { resps[i], errs[i] = client.Heartbeat(ctx, req) })
	}
	wg.Wait()
	return resps, errs
}

// answerLimit bounds how long heartbeatAll waits for an answer: far more
// than any of these tests needs, even on a busy machine.
const answerLimit = 30 * time.Second

// Heartbeats that reach a follower together reach the leader in one call,
// and each caller gets exactly the answer the leader gives its heartbeat
// alone: the refusals with their code, message and ErrorInfo.
func TestForwardedHeartbeatsTravelInOneBatch(t *testing.T) {
	leader := newEnv(t)
	leader.setLeader(true)
	var reqs []*pbagent.HeartbeatRequest
	for i := range 40 {
		name := fmt.Sprintf("i-%d", i)
		leader.register(name, "s1", "ready")
		reqs = append(reqs, &pbagent.HeartbeatRequest{Instance: name, Session: "s1"})
	}
	leader.register("stale", "s2", "ready")
	leader.register("down", "s1", "down")
	leader.register("left", "s1", "left")
	refused := map[string]heartbeat.Reason{
		"stale":   heartbeat.ReasonSessionMismatch,
		"down":    heartbeat.ReasonDown,
		"left":    heartbeat.ReasonLeft,
		"missing": heartbeat.ReasonNotRegistered,
	}
	for _, name := range []string{"stale", "down", "left", "missing"} {
		reqs = append(reqs, &pbagent.HeartbeatRequest{Instance: name, Session: "s1"})
	}
	onLeader := &calls{}
	leaderClient, leaderAddr := serve(t, heartbeat.ServiceConfig{Tracker: leader.tracker}, grpc.UnaryInterceptor(onLeader.intercept))

	// The batch leaves when it holds every heartbeat, never by the clock.
	follower := newEnv(t)
	toLeader := dial(t, leaderAddr)
	followerClient, _ := serve(t, heartbeat.ServiceConfig{
		Tracker:       follower.tracker,
		LeaderConn:    func() (*grpc.ClientConn, error) { return toLeader, nil },
		ForwardBatch:  len(reqs),
		ForwardWindow: time.Hour,
	})
	resps, errs := heartbeatAll(followerClient, reqs)

	if n := onLeader.count(pbagent.HeartbeatForwarding_ForwardHeartbeats_FullMethodName); n != 1 {
		t.Errorf("the leader got %d ForwardHeartbeats calls, want 1", n)
	}
	if n := onLeader.count(pbagent.AgentService_Heartbeat_FullMethodName); n != 0 {
		t.Errorf("the leader got %d Heartbeat calls, want none", n)
	}
	if got := follower.metric("trellis_heartbeat_forward_batches_total", "ok"); got != 1 {
		t.Errorf("forward_batches_total{ok} = %v, want 1", got)
	}
	if got := follower.metric("trellis_heartbeat_requests_total", "forwarded"); got != float64(len(reqs)) {
		t.Errorf("requests_total{forwarded} = %v, want %d", got, len(reqs))
	}
	if got := follower.metric("trellis_heartbeat_answer_seconds", "forwarded"); got != float64(len(reqs)) {
		t.Errorf("answer_seconds{forwarded} counts %v heartbeats, want %d", got, len(reqs))
	}
	// The leader times only the heartbeats agents send it, not a batch's.
	if got := leader.metric("trellis_heartbeat_answer_seconds", "kept"); got != 0 {
		t.Errorf("the leader's answer_seconds{kept} counts %v heartbeats of a forwarded batch, want 0", got)
	}
	if _, err := leaderClient.Heartbeat(context.Background(), reqs[0]); err != nil {
		t.Fatalf("a heartbeat on the leader: %v", err)
	}
	if got := leader.metric("trellis_heartbeat_answer_seconds", "kept"); got != 1 {
		t.Errorf("the leader's answer_seconds{kept} = %v after one heartbeat, want 1", got)
	}

	for i, req := range reqs {
		name := req.GetInstance()
		if want, ok := refused[name]; ok {
			if heartbeat.ReasonOf(errs[i]) != want {
				t.Errorf("%s through the follower = %v, want reason %s", name, errs[i], want)
			}
		} else if errs[i] != nil || resps[i].GetLeader() != leaderAddr || resps[i].GetTtl().AsDuration() != testTTL {
			t.Errorf("%s through the follower = %v, %v; want ttl %s and leader %s", name, resps[i], errs[i], testTTL, leaderAddr)
		}
		alone, err := leaderClient.Heartbeat(context.Background(), req)
		if !proto.Equal(status.Convert(errs[i]).Proto(), status.Convert(err).Proto()) || !proto.Equal(resps[i], alone) {
			t.Errorf("%s: through the follower %v, %v; from the leader alone %v, %v", name, resps[i], errs[i], alone, err)
		}
	}
}

// When the batch's call fails, every heartbeat of it is answered
// Unavailable at once, which agents retry, and carries no reason to
// register again: the leader answered (here, a server without the
// service), so there is nothing to hold the heartbeats for.
func TestFailedBatchIsUnavailable(t *testing.T) {
	// A gRPC server without HeartbeatForwarding: the call fails Unimplemented.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bare := grpc.NewServer()
	go func() { _ = bare.Serve(ln) }()
	t.Cleanup(bare.Stop)
	toBare := dial(t, ln.Addr().String())

	reqs := []*pbagent.HeartbeatRequest{{Instance: "i-1", Session: "s1"}, {Instance: "i-2", Session: "s1"}, {Instance: "i-3", Session: "s1"}}
	e := newEnv(t)
	// The batch leaves when it holds every heartbeat, never by the clock.
	client, _ := serve(t, heartbeat.ServiceConfig{Tracker: e.tracker, LeaderConn: func() (*grpc.ClientConn, error) { return toBare, nil },
		ForwardBatch: len(reqs), ForwardWindow: time.Hour})
	_, errs := heartbeatAll(client, reqs)
	for i, err := range errs {
		if status.Code(err) != codes.Unavailable || heartbeat.ReasonOf(err) != "" {
			t.Errorf("heartbeat of %s = %v, want Unavailable without a reason", reqs[i].GetInstance(), err)
		}
	}
	if failed := e.metric("trellis_heartbeat_forward_batches_total", "failed"); failed != 1 {
		t.Errorf("forward_batches_total{failed} = %v, want 1", failed)
	}
}

// When no leader can be reached, the heartbeats of a failed batch are held
// and sent again, in new batches, until the hold ends; then each is
// answered Unavailable, without a reason. In a bubble: the retries come
// before the end of the hold by the clock, not by how busy the machine is.
//
// (This case ran over gRPC with a window of an hour and a batch of three,
// and hung when a busy machine spread the retries of one round over the
// end of the hold: a heartbeat whose hold ended returned, and one that
// was already sent again waited for a batch that could no longer fill.)
func TestHeldBatchIsUnavailableAfterTheHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hold = 300 * time.Millisecond
		e := newEnv(t)
		var lookups atomic.Int32
		svc, err := heartbeat.NewService(heartbeat.ServiceConfig{
			Tracker: e.tracker,
			LeaderConn: func() (*grpc.ClientConn, error) {
				lookups.Add(1)
				return nil, errors.New("no leader is known")
			},
			ForwardTimeout: hold,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- svc.Start(ctx) }()
		defer func() {
			cancel()
			if err := <-stopped; err != nil {
				t.Errorf("Service.Start = %v", err)
			}
		}()

		reqs := []*pbagent.HeartbeatRequest{{Instance: "i-1", Session: "s1"}, {Instance: "i-2", Session: "s1"}, {Instance: "i-3", Session: "s1"}}
		start := time.Now()
		errs := make([]error, len(reqs))
		var wg sync.WaitGroup
		for i, req := range reqs {
			wg.Go(func() { _, errs[i] = svc.Heartbeat(context.Background(), req) })
		}
		wg.Wait()
		if took := time.Since(start); took < hold {
			t.Errorf("the heartbeats were answered after %s, before the hold of %s ended", took, hold)
		}
		for i, err := range errs {
			if status.Code(err) != codes.Unavailable || heartbeat.ReasonOf(err) != "" {
				t.Errorf("heartbeat of %s = %v, want Unavailable without a reason", reqs[i].GetInstance(), err)
			}
		}
		// Sent again while held: more than one failed batch, each a look
		// for the leader.
		if failed := e.metric("trellis_heartbeat_forward_batches_total", "failed"); failed <= 1 || int32(failed) != lookups.Load() {
			t.Errorf("forward_batches_total{failed} = %v after %d lookups of the leader, want as many, more than 1", failed, lookups.Load())
		}
	})
}

// switchable is a follower's idea of the leader, which the test changes:
// none, a server that has died, then a live leader.
type switchable struct {
	mu      sync.Mutex
	conn    *grpc.ClientConn
	err     error
	calls   int
	changed chan struct{}
}

// leaderChanged is closed at the next set, as the Raft backend's Changed.
func (s *switchable) leaderChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

func (s *switchable) leaderConn() (*grpc.ClientConn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return s.conn, s.err
}

func (s *switchable) set(conn *grpc.ClientConn, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn, s.err, s.calls = conn, err, 0
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// tried reports whether the forwarder has looked for the leader n times
// since the last set.
func (s *switchable) tried(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls >= n
}

// During an election a follower holds a heartbeat, and the new leader
// takes it as soon as it is elected: the agent sees a slower answer, not
// a refusal that would make it give up its server and back off. Held
// through no known leader, then a dead one.
func TestHeartbeatHeldUntilALeaderTakesIt(t *testing.T) {
	leader := newEnv(t)
	leader.setLeader(true)
	leader.register("i-1", "s1", "ready")
	_, leaderAddr := serve(t, heartbeat.ServiceConfig{Tracker: leader.tracker})
	toLeader := dial(t, leaderAddr)
	// A leader that has died: nothing listens at its address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := ln.Addr().String()
	ln.Close()
	toDead := dial(t, deadAddr)

	idea := &switchable{err: errors.New("no leader is known")}
	client, _ := serve(t, heartbeat.ServiceConfig{Tracker: newEnv(t).tracker, LeaderConn: idea.leaderConn, LeaderChanged: idea.leaderChanged,
		ForwardTimeout: time.Minute})
	type result struct {
		resp *pbagent.HeartbeatResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := client.Heartbeat(context.Background(), &pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"})
		done <- result{resp, err}
	}()
	waitFor(t, "the follower to look for a leader twice", func() bool { return idea.tried(2) })
	idea.set(toDead, nil)
	waitFor(t, "the follower to try the dead leader twice", func() bool { return idea.tried(2) })
	select {
	case r := <-done:
		t.Fatalf("the heartbeat was answered while no leader could take it: %v, %v", r.resp, r.err)
	default:
	}
	idea.set(toLeader, nil)
	r := <-done
	if r.err != nil || r.resp.GetLeader() != leaderAddr {
		t.Fatalf("held heartbeat = %v, %v; want it taken by the leader %s", r.resp, r.err, leaderAddr)
	}
}

// A follower elected while it holds a heartbeat takes it itself.
func TestHeldHeartbeatTakenWhenThisServerIsElected(t *testing.T) {
	e := newEnv(t)
	e.register("i-1", "s1", "ready")
	idea := &switchable{err: errors.New("no leader is known")}
	client, addr := serve(t, heartbeat.ServiceConfig{Tracker: e.tracker, LeaderConn: idea.leaderConn, ForwardTimeout: time.Minute})
	done := make(chan error, 1)
	var resp *pbagent.HeartbeatResponse
	go func() {
		var err error
		resp, err = client.Heartbeat(context.Background(), &pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"})
		done <- err
	}()
	waitFor(t, "the follower to look for a leader twice", func() bool { return idea.tried(2) })
	e.setLeader(true)
	if err := <-done; err != nil || resp.GetLeader() != addr {
		t.Fatalf("held heartbeat = %v, %v; want it taken by this server, %s", resp, err, addr)
	}
}

// The leader's side of a batch: each heartbeat answered on its own, a
// malformed one refused alone, a server that does not lead refusing each
// with Unavailable (never forwarding them again), an oversized batch
// refused whole.
func TestForwardHeartbeatsOnTheLeader(t *testing.T) {
	ctx := context.Background()
	leader := newEnv(t)
	leader.setLeader(true)
	leader.register("i-1", "s1", "ready")
	_, leaderAddr := serve(t, heartbeat.ServiceConfig{Tracker: leader.tracker})
	leaderClient := pbagent.NewHeartbeatForwardingClient(dial(t, leaderAddr))
	batch := &pbagent.ForwardHeartbeatsRequest{Heartbeats: []*pbagent.HeartbeatRequest{
		{Instance: "i-1", Session: "s1"},
		{Instance: "Not_A_Name", Session: "s1"},
		{Instance: "i-1", Session: "old"},
	}}
	resp, err := leaderClient.ForwardHeartbeats(ctx, batch)
	if err != nil || len(resp.GetResults()) != 3 {
		t.Fatalf("ForwardHeartbeats = %v, %v; want 3 results", resp, err)
	}
	r := resp.GetResults()
	if r[0].GetResponse().GetTtl().AsDuration() != testTTL || len(r[0].GetStatus()) != 0 {
		t.Errorf("result of a live instance = %v, want a response and no status", r[0])
	}
	for i, want := range map[int]codes.Code{1: codes.InvalidArgument, 2: codes.FailedPrecondition} {
		if r[i].GetResponse() != nil || len(r[i].GetStatus()) == 0 {
			t.Errorf("result %d = %v, want a status and no response", i, r[i])
		}
		if code := statusOf(t, r[i]).Code(); code != want {
			t.Errorf("result %d: code %s, want %s", i, code, want)
		}
	}

	// A server that does not lead, though its idea of the leader is
	// reachable: it answers, it does not forward.
	notLeader := newEnv(t)
	onOther := &calls{}
	_, otherAddr := serve(t, heartbeat.ServiceConfig{Tracker: newEnv(t).tracker}, grpc.UnaryInterceptor(onOther.intercept))
	toOther := dial(t, otherAddr)
	_, notLeaderAddr := serve(t, heartbeat.ServiceConfig{Tracker: notLeader.tracker, LeaderConn: func() (*grpc.ClientConn, error) { return toOther, nil }})
	resp, err = pbagent.NewHeartbeatForwardingClient(dial(t, notLeaderAddr)).ForwardHeartbeats(ctx, &pbagent.ForwardHeartbeatsRequest{Heartbeats: batch.GetHeartbeats()[:1]})
	if err != nil || len(resp.GetResults()) != 1 || statusOf(t, resp.GetResults()[0]).Code() != codes.Unavailable {
		t.Errorf("ForwardHeartbeats to a server that does not lead = %v, %v; want one Unavailable", resp, err)
	}
	if n := onOther.count(pbagent.HeartbeatForwarding_ForwardHeartbeats_FullMethodName) + onOther.count(pbagent.AgentService_Heartbeat_FullMethodName); n != 0 {
		t.Errorf("a forwarded batch was forwarded again (%d calls)", n)
	}

	big := &pbagent.ForwardHeartbeatsRequest{}
	for range heartbeat.MaxForwardBatch + 1 {
		big.Heartbeats = append(big.Heartbeats, batch.GetHeartbeats()[0])
	}
	if _, err := leaderClient.ForwardHeartbeats(ctx, big); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ForwardHeartbeats of %d = %v, want InvalidArgument", len(big.GetHeartbeats()), err)
	}
}

// statusOf reads the status of a heartbeat's result.
func statusOf(t *testing.T, r *pbagent.HeartbeatResult) *status.Status {
	t.Helper()
	p := new(spb.Status)
	if err := proto.Unmarshal(r.GetStatus(), p); err != nil {
		t.Fatal(err)
	}
	return status.FromProto(p)
}

// A heartbeat whose caller gives up stops waiting for its batch.
func TestCallerStopsWaitingForTheBatch(t *testing.T) {
	leader := newEnv(t)
	leader.setLeader(true)
	_, leaderAddr := serve(t, heartbeat.ServiceConfig{Tracker: leader.tracker})
	toLeader := dial(t, leaderAddr)
	svc, _, _ := serveService(t, heartbeat.ServiceConfig{
		Tracker:       newEnv(t).tracker,
		LeaderConn:    func() (*grpc.ClientConn, error) { return toLeader, nil },
		ForwardWindow: time.Hour,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := svc.Heartbeat(ctx, &pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"})
		done <- err
	}()
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("Heartbeat after its caller gave up = %v, want Canceled", err)
	}
}

// The forwarder stops with the server: the heartbeats it holds, and those
// that arrive after, are answered Unavailable.
func TestForwarderStops(t *testing.T) {
	leader := newEnv(t)
	leader.setLeader(true)
	leader.register("i-1", "s1", "ready")
	_, leaderAddr := serve(t, heartbeat.ServiceConfig{Tracker: leader.tracker})
	toLeader := dial(t, leaderAddr)
	svc, err := heartbeat.NewService(heartbeat.ServiceConfig{
		Tracker:       newEnv(t).tracker,
		LeaderConn:    func() (*grpc.ClientConn, error) { return toLeader, nil },
		ForwardWindow: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- svc.Start(ctx) }()
	req := &pbagent.HeartbeatRequest{Instance: "i-1", Session: "s1"}
	held := make(chan error, 1)
	go func() {
		_, err := svc.Heartbeat(context.Background(), req)
		held <- err
	}()
	cancel()
	if err := <-stopped; err != nil {
		t.Fatalf("Start = %v, want nil", err)
	}
	if err := <-held; status.Code(err) != codes.Unavailable {
		t.Errorf("a heartbeat held while the forwarder stopped = %v, want Unavailable", err)
	}
	if _, err := svc.Heartbeat(context.Background(), req); status.Code(err) != codes.Unavailable {
		t.Errorf("a heartbeat after the forwarder stopped = %v, want Unavailable", err)
	}
}
