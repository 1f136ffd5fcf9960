package session

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
)

// The agent heartbeats over one stream per session (AgentService.
// HeartbeatStream): a message each way per heartbeat, where a call costs a
// new HTTP/2 stream with its headers and trailers on both sides. What
// remains per heartbeat is the two messages' system calls, which on
// loopback are most of the cost: measured with 5,000 simulated instances,
// the stream saved about 4% of all processes' CPU at rest.
//
// A slow answer does not end the stream. The server answers the
// heartbeats of a stream one after another, in the order they were sent,
// so the k-th answer is the k-th heartbeat's: a late answer is known for
// what it is and never taken for a later heartbeat's. Closing the stream
// on a slow answer, as the agent once did, threw away the heartbeat the
// server was about to take (a follower drops the heartbeats of callers
// that stopped waiting) and made a busy server busier with a new stream;
// at 5,000 instances that turned a slow deployment into thousands of live
// instances marked down. Only an error ends a stream: the server's
// refusal, or the transport's.

// beatStream is a session's open heartbeat stream: heartbeats are sent on
// it in order, and their answers come back in the same order.
type beatStream struct {
	stream pbagent.AgentService_HeartbeatStreamClient
	cancel context.CancelFunc
	clock  Clock

	mu sync.Mutex
	// sent and answered count the heartbeats sent on the stream and the
	// answers received: the k-th answer is the k-th heartbeat's.
	sent, answered uint64
	// last is the newest answer; err, once set, ended the stream.
	last *pbagent.HeartbeatResponse
	err  error
	// lastOK is when an answer last said the instance is alive.
	lastOK time.Time
	// progress is closed and replaced at every answer.
	progress chan struct{}
}

// beatOnStream sends one heartbeat on the session's stream, opening it
// first if need be, and waits up to timeout for its answer. A slow answer
// is DeadlineExceeded and leaves the stream open: the answer, when it
// comes, counts (LastAnswered). An error answer ends the stream; the next
// heartbeat opens a new one. ctx is the session's: the stream lives as
// long as it.
func (c *conn) beatOnStream(ctx context.Context, req *pbagent.HeartbeatRequest, timeout time.Duration) (*pbagent.HeartbeatResponse, error) {
	if c.beats == nil {
		bs, err := c.openBeatStream(ctx)
		if err != nil {
			return nil, err
		}
		c.beats = bs
	}
	bs := c.beats
	bs.mu.Lock()
	bs.sent++
	n := bs.sent
	bs.mu.Unlock()
	// A failed Send means the stream has ended; its reason comes from the
	// receiving side.
	_ = bs.stream.Send(req)
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		bs.mu.Lock()
		answered, last, err, progress := bs.answered, bs.last, bs.err, bs.progress
		bs.mu.Unlock()
		switch {
		case err != nil:
			c.closeBeatStream()
			return nil, err
		case answered >= n:
			return last, nil
		}
		select {
		case <-progress:
		case <-t.C:
			return nil, status.Errorf(codes.DeadlineExceeded, "heartbeat: no answer within %s (the stream is kept: a late answer still counts)", timeout)
		case <-ctx.Done():
			c.closeBeatStream()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// lastAnswered is when an answer on the open stream last said the
// instance is alive (zero when none did, or no stream is open): a late
// answer to a heartbeat the agent stopped waiting for counts.
func (c *conn) lastAnswered() time.Time {
	if c.beats == nil {
		return time.Time{}
	}
	c.beats.mu.Lock()
	defer c.beats.mu.Unlock()
	return c.beats.lastOK
}

func (c *conn) openBeatStream(ctx context.Context) (*beatStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	stream, err := c.hb.HeartbeatStream(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	bs := &beatStream{stream: stream, cancel: cancel, clock: c.s.clock, progress: make(chan struct{})}
	go bs.receive()
	return bs, nil
}

// receive takes the stream's answers in order until it fails.
func (bs *beatStream) receive() {
	for {
		resp, err := bs.stream.Recv()
		if errors.Is(err, io.EOF) {
			err = status.Error(codes.Unavailable, "the server ended the heartbeat stream")
		}
		bs.mu.Lock()
		if err != nil {
			bs.err = err
		} else {
			bs.answered++
			bs.last = resp
			bs.lastOK = bs.now()
		}
		close(bs.progress)
		bs.progress = make(chan struct{})
		bs.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (bs *beatStream) now() time.Time {
	if bs.clock == nil {
		return time.Now()
	}
	return bs.clock.Now()
}

// closeBeatStream ends the session's heartbeat stream, if one is open.
func (c *conn) closeBeatStream() {
	if c.beats != nil {
		c.beats.cancel()
		c.beats = nil
	}
}
