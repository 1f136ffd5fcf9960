package heartbeat

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pbagent "trellis.dev/trellis/api/agent/v1"
)

// Defaults of the follower's batching of forwarded heartbeats. A batch is
// sent when it is full or when its window ends, whichever comes first. A
// window of 20 ms adds 20 ms to a heartbeat that has seconds to spare (the
// agent sends one every TTL/3), and turns a few hundred unary calls a
// second into a few dozen on the leader.
const (
	DefaultForwardWindow = 20 * time.Millisecond
	DefaultForwardBatch  = 1000
	// DefaultForwardTimeout bounds one batch call to the leader, and how
	// long a heartbeat is held while no leader can be reached. A caller
	// whose own deadline is shorter stops waiting sooner.
	DefaultForwardTimeout = 5 * time.Second
	// forwardsInFlight is how many batches may wait on the leader at once:
	// a slow batch does not hold up the next window's heartbeats, and a
	// leader that hangs does not collect goroutines without bound.
	forwardsInFlight = 4
	// holdRetryMin and holdRetryMax pace the attempts to reach a leader
	// while a heartbeat is held, between the leader changes that
	// LeaderChanged reports (without it, a new leader takes the heartbeat
	// within holdRetryMax of being elected). Thousands of agents may be
	// held at once while a cluster has no quorum.
	holdRetryMin = 10 * time.Millisecond
	holdRetryMax = 500 * time.Millisecond
)

// errForwarderStopped answers the heartbeats a follower can no longer
// forward because it is shutting down.
var errForwarderStopped = status.Error(codes.Unavailable, "this server is shutting down: retry the heartbeat on another server")

// forwarder is a follower's way to the leader: heartbeats wait in it for
// the current batch, which goes to the leader as one ForwardHeartbeats
// call, and each caller gets its own heartbeat's answer back. run is its
// one collecting goroutine, for the life of the server.
type forwarder struct {
	leaderConn func() (*grpc.ClientConn, error)
	// local takes a heartbeat on this server, failing with ErrNotLeader
	// unless it leads: a heartbeat held for a leader is taken here once
	// this server is elected.
	// waited is how long the heartbeat has been held.
	local func(ctx context.Context, req *pbagent.HeartbeatRequest, waited time.Duration) (*pbagent.HeartbeatResponse, error)
	// leaderChanged, when set, is closed at the next change of leader.
	leaderChanged func() <-chan struct{}
	window        time.Duration
	maxBatch      int
	timeout       time.Duration
	metrics       *metrics

	// queue is unbuffered: a heartbeat is either taken by run, which then
	// answers it, or refused once stopped is closed; none is dropped.
	queue   chan *waiting
	stopped chan struct{}
}

// waiting is one heartbeat waiting for its answer.
type waiting struct {
	ctx context.Context
	req *pbagent.HeartbeatRequest
	// since is when this server received the heartbeat: the leader counts
	// it as heard then, not when it took it.
	since  time.Time
	answer chan answer // buffered: the caller may have stopped waiting
}

type answer struct {
	resp *pbagent.HeartbeatResponse
	err  error
	// noLeader: no leader took the heartbeat (none is known, the one
	// known could not be reached, or it no longer leads). err is then
	// Unavailable, and trying again once a leader is elected may succeed.
	noLeader bool
}

func newForwarder(leaderConn func() (*grpc.ClientConn, error),
	local func(context.Context, *pbagent.HeartbeatRequest, time.Duration) (*pbagent.HeartbeatResponse, error),
	cfg ServiceConfig, m *metrics) *forwarder {
	f := &forwarder{
		leaderConn:    leaderConn,
		local:         local,
		leaderChanged: cfg.LeaderChanged,
		window:        cfg.ForwardWindow,
		maxBatch:      cfg.ForwardBatch,
		timeout:       cfg.ForwardTimeout,
		metrics:       m,
		queue:         make(chan *waiting),
		stopped:       make(chan struct{}),
	}
	if f.window <= 0 {
		f.window = DefaultForwardWindow
	}
	if f.maxBatch <= 0 {
		f.maxBatch = DefaultForwardBatch
	}
	f.maxBatch = min(f.maxBatch, MaxForwardBatch)
	if f.timeout <= 0 {
		f.timeout = DefaultForwardTimeout
	}
	return f
}

// forward hands req to the leader, in the next batch, and waits for the
// leader's answer, or until ctx ends.
//
// While no leader takes it (none is known yet, the one this server knows
// has died and the next is not elected, or it has just stepped down), the
// heartbeat is held and sent again, until a leader takes it, ctx ends or
// the forward timeout passes, as the storage holds writes during an
// election and Consul's servers hold RPCs. An election then costs the
// agent a slower heartbeat, not its server: answered Unavailable at once,
// agents gave up the server, tried the others, found no leader there
// either, and backed off for seconds (up to a third of the TTL), so that
// they came back, and started the tasks a new leader placed, up to 2.3 s
// after it placed them (measured: a rolling deployment on 200 simulated
// instances finished 2.7-6.5 s after its leader was killed, now 2.1-2.7 s).
// A held heartbeat is sent again at each change of leader, and now and
// then between. If this server is elected meanwhile, it takes the
// heartbeat itself.
func (f *forwarder) forward(ctx context.Context, req *pbagent.HeartbeatRequest) (*pbagent.HeartbeatResponse, error) {
	since := time.Now()
	hold := time.NewTimer(f.timeout)
	defer hold.Stop()
	wait := holdRetryMin
	for {
		var changed <-chan struct{} // nil: never
		if f.leaderChanged != nil {
			changed = f.leaderChanged()
		}
		a := f.forwardOnce(ctx, req, since)
		if !a.noLeader {
			return a.resp, a.err
		}
		retry := time.NewTimer(wait)
		select {
		case <-changed:
			retry.Stop()
		case <-retry.C:
		case <-hold.C:
			retry.Stop()
			return nil, a.err
		case <-f.stopped:
			retry.Stop()
			return nil, errForwarderStopped
		case <-ctx.Done():
			retry.Stop()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		wait = min(2*wait, holdRetryMax)
		if f.local != nil {
			if resp, err := f.local(ctx, req, time.Since(since)); !errors.Is(err, ErrNotLeader) {
				return resp, err
			}
		}
	}
}

// forwardOnce hands req to the next batch and waits for its answer.
func (f *forwarder) forwardOnce(ctx context.Context, req *pbagent.HeartbeatRequest, since time.Time) answer {
	w := &waiting{ctx: ctx, req: req, since: since, answer: make(chan answer, 1)}
	select {
	case f.queue <- w:
	case <-f.stopped:
		return answer{err: errForwarderStopped}
	case <-ctx.Done():
		return answer{err: status.FromContextError(ctx.Err()).Err()}
	}
	select {
	case a := <-w.answer:
		return a
	case <-ctx.Done():
		return answer{err: status.FromContextError(ctx.Err()).Err()}
	}
}

// run collects batches and sends them until ctx ends. Then it refuses new
// heartbeats at once, answers those it holds with Unavailable, and
// returns once the batches under way are answered (their calls are
// cancelled with ctx).
func (f *forwarder) run(ctx context.Context) error {
	var sends sync.WaitGroup
	defer sends.Wait()
	defer close(f.stopped)
	slots := make(chan struct{}, forwardsInFlight)
	for {
		batch, more := f.collect(ctx)
		if !more {
			answerAll(batch, answer{err: errForwarderStopped})
			return nil
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			answerAll(batch, answer{err: errForwarderStopped})
			return nil
		}
		sends.Add(1)
		go func() {
			defer sends.Done()
			defer func() { <-slots }()
			f.send(ctx, batch)
		}()
	}
}

// collect waits for a first heartbeat, then takes more until the batch is
// full or the window since the first has passed. more is false when ctx
// ended: the heartbeats already taken are in batch, to be answered.
func (f *forwarder) collect(ctx context.Context) (batch []*waiting, more bool) {
	select {
	case <-ctx.Done():
		return nil, false
	case w := <-f.queue:
		batch = append(batch, w)
	}
	window := time.NewTimer(f.window)
	defer window.Stop()
	for len(batch) < f.maxBatch {
		select {
		case <-ctx.Done():
			return batch, false
		case <-window.C:
			return batch, true
		case w := <-f.queue:
			batch = append(batch, w)
		}
	}
	return batch, true
}

// send forwards the batch in one call and answers each heartbeat with its
// own result. When the call fails, every heartbeat of it is Unavailable:
// heartbeats change nothing but the leader's memory, so they are sent
// again (forward) or the agents retry.
func (f *forwarder) send(ctx context.Context, batch []*waiting) {
	// Callers who stopped waiting are not forwarded.
	live := batch[:0]
	for _, w := range batch {
		if w.ctx.Err() == nil {
			live = append(live, w)
		}
	}
	if len(live) == 0 {
		return
	}
	req := &pbagent.ForwardHeartbeatsRequest{
		Heartbeats: make([]*pbagent.HeartbeatRequest, len(live)),
		Waited:     make([]*durationpb.Duration, len(live)),
	}
	now := time.Now()
	for i, w := range live {
		req.Heartbeats[i] = w.req
		req.Waited[i] = durationpb.New(now.Sub(w.since))
	}
	f.metrics.forwardBatchSize.Observe(float64(len(live)))
	conn, err := f.leaderConn()
	if err != nil {
		f.metrics.forwardBatches.WithLabelValues(batchFailed).Inc()
		answerAll(live, answer{err: status.Errorf(codes.Unavailable, "cannot reach the leader to take this heartbeat: %v; retry shortly", err), noLeader: true})
		return
	}
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	resp, err := pbagent.NewHeartbeatForwardingClient(conn).ForwardHeartbeats(cctx, req)
	if err == nil && len(resp.GetResults()) != len(live) {
		err = status.Errorf(codes.Internal, "the leader answered %d heartbeats of %d", len(resp.GetResults()), len(live))
	}
	if err != nil {
		f.metrics.forwardBatches.WithLabelValues(batchFailed).Inc()
		// Unavailable: the leader could not be reached (it died, or is
		// shutting down). Any other failure is not an election's.
		answerAll(live, answer{
			err:      status.Errorf(codes.Unavailable, "forwarding the heartbeat to the leader: %v; retry shortly", status.Convert(err).Message()),
			noLeader: status.Code(err) == codes.Unavailable,
		})
		return
	}
	f.metrics.forwardBatches.WithLabelValues(batchOK).Inc()
	for i, w := range live {
		r, err := decodeResult(resp.GetResults()[i])
		// Unavailable from the leader: it no longer leads (errNoLeader).
		w.answer <- answer{resp: r, err: err, noLeader: status.Code(err) == codes.Unavailable}
	}
}

func answerAll(batch []*waiting, a answer) {
	for _, w := range batch {
		w.answer <- a
	}
}
