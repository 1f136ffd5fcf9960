package tasklogs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/resource"
)

// DefaultAnswerTimeout bounds how long the Hub waits for the agent to
// answer a request (its SendLogs call with the first chunk).
const DefaultAnswerTimeout = 10 * time.Second

// Hub is a server's side of the agents' links: which instances' agents
// are attached here (Attach), the reads under way, and the agents'
// answers (SendLogs).
type Hub struct {
	// AnswerTimeout: DefaultAnswerTimeout when zero.
	AnswerTimeout time.Duration

	mu      sync.Mutex
	links   map[string]*link    // by instance
	pending map[string]*pending // by request id
}

// link is one agent's Attach stream.
type link struct {
	instance string
	requests chan *pbagent.LogRequest
	// replaced is closed when a newer Attach of the instance took over.
	replaced chan struct{}
}

// pending is a read waiting for, then reading, the agent's answer.
type pending struct {
	instance string
	// answer receives the agent's SendLogs stream, once.
	answer chan pbagent.LogService_SendLogsServer
	// done is closed when the reader has finished: SendLogs returns.
	done chan struct{}
}

// NewHub returns a Hub with no agent attached.
func NewHub() *Hub {
	return &Hub{links: map[string]*link{}, pending: map[string]*pending{}}
}

// Attached reports whether the agent of instance is attached here.
func (h *Hub) Attached(instance string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.links[instance] != nil
}

// Pending is the number of reads under way (tests and metrics).
func (h *Hub) Pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending)
}

// Attach serves LogService.Attach: it records the agent's link, sends it
// the requests of reads, and forgets it when the stream ends.
func (h *Hub) Attach(stream pbagent.LogService_AttachServer) error {
	hello, err := stream.Recv()
	if err != nil {
		return err
	}
	if err := resource.ValidateName("instance", hello.GetInstance()); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	// Only the instance's agent takes its reads: the server's edge proves
	// who calls (its Connect agent leaf, or the session it registered
	// last: resource.AsAgent).
	if proven := resource.StatusWriterOf(stream.Context()).Agent; proven != hello.GetInstance() {
		return status.Error(codes.PermissionDenied, attachRefusal(hello.GetInstance(), proven))
	}
	l := &link{instance: hello.GetInstance(), requests: make(chan *pbagent.LogRequest), replaced: make(chan struct{})}
	h.mu.Lock()
	if old := h.links[l.instance]; old != nil {
		close(old.replaced)
	}
	h.links[l.instance] = l
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		if h.links[l.instance] == l {
			delete(h.links, l.instance)
		}
		h.mu.Unlock()
	}()
	// The agent sends nothing more, and its going away (it moved to
	// another server, it stopped, its connection broke) ends the stream's
	// context: no goroutine waits on Recv, so that a link costs a fleet's
	// servers one goroutine per agent.
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-l.replaced:
			return status.Errorf(codes.Aborted, "a newer link of instance %s replaced this one", l.instance)
		case req := <-l.requests:
			if err := stream.Send(req); err != nil {
				return err
			}
		}
	}
}

// SendLogs serves LogService.SendLogs: it hands the agent's answer to the
// read that asked for it and returns when that read is done.
func (h *Hub) SendLogs(stream pbagent.LogService_SendLogsServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.GetRequestId() == "" {
		return status.Error(codes.InvalidArgument, errBadFirstChunk.Error())
	}
	h.mu.Lock()
	p := h.pending[first.GetRequestId()]
	h.mu.Unlock()
	if p == nil {
		return status.Errorf(codes.NotFound, "no read %s is waiting (it ended, or timed out)", first.GetRequestId())
	}
	// The read gets the first chunk through the stream it is handed: a
	// stream whose Recv returns first once, then the agent's next ones.
	a := &answered{LogService_SendLogsServer: stream, first: first}
	select {
	case p.answer <- a:
	default:
		return status.Errorf(codes.AlreadyExists, "read %s is answered already", first.GetRequestId())
	}
	select {
	case <-p.done:
		return status.Error(codes.Canceled, "the reader has gone")
	case <-stream.Context().Done():
		return status.FromContextError(stream.Context().Err()).Err()
	}
}

// answered replays the first chunk before the stream's next ones.
type answered struct {
	pbagent.LogService_SendLogsServer
	first *pbagent.LogChunk
}

func (a *answered) Recv() (*pbagent.LogChunk, error) {
	if c := a.first; c != nil {
		a.first = nil
		return c, nil
	}
	return a.LogService_SendLogsServer.Recv()
}

// Open reads logs through the agent attached here: it sends req down the
// agent's link and waits for its answer. The Chunks it returns end with
// io.EOF at the end of the logs; Close ends the read (and the agent's
// SendLogs). NOT_ATTACHED when the agent is not attached here.
func (h *Hub) Open(ctx context.Context, req *pbagent.LogRequest) (Chunks, error) {
	if err := CheckRequest(req); err != nil {
		return nil, err
	}
	h.mu.Lock()
	l := h.links[req.GetInstance()]
	h.mu.Unlock()
	if l == nil {
		return nil, notAttached(req.GetInstance())
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	p := &pending{instance: req.GetInstance(), answer: make(chan pbagent.LogService_SendLogsServer, 1), done: make(chan struct{})}
	h.mu.Lock()
	h.pending[id] = p
	h.mu.Unlock()
	finish := func() {
		h.mu.Lock()
		delete(h.pending, id)
		h.mu.Unlock()
		close(p.done)
	}
	timeout := h.AnswerTimeout
	if timeout <= 0 {
		timeout = DefaultAnswerTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	sent := proto.Clone(req).(*pbagent.LogRequest)
	sent.Id = id
	select {
	case l.requests <- sent:
	case <-l.replaced:
		finish()
		return nil, status.Errorf(codes.Unavailable, "the agent of instance %s reconnected; try again", req.GetInstance())
	case <-ctx.Done():
		finish()
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-timer.C:
		finish()
		return nil, status.Errorf(codes.Unavailable, "the agent of instance %s took no request for %s", req.GetInstance(), timeout)
	}
	var stream pbagent.LogService_SendLogsServer
	select {
	case stream = <-p.answer:
	case <-ctx.Done():
		finish()
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-timer.C:
		finish()
		return nil, status.Errorf(codes.Unavailable, "the agent of instance %s did not answer within %s", req.GetInstance(), timeout)
	}
	first, err := stream.Recv()
	if err == nil {
		err = openError(first)
	}
	if err != nil {
		finish()
		return nil, err
	}
	// The read ends with ctx too: the agent's call ends then, which ends
	// its read of the output.
	fin := sync.OnceFunc(finish)
	stop := context.AfterFunc(ctx, fin)
	return &hubChunks{stream: stream, finish: func() { stop(); fin() }}, nil
}

// Chunks is a read's output, chunk by chunk.
type Chunks interface {
	// Next returns the next chunk of output, io.EOF at the end.
	Next() ([]byte, error)
	// Close ends the read.
	Close()
}

type hubChunks struct {
	stream pbagent.LogService_SendLogsServer
	finish func()
}

func (c *hubChunks) Next() ([]byte, error) {
	for {
		m, err := c.stream.Recv()
		if err == io.EOF {
			return nil, io.EOF
		}
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "the agent's answer broke off: %v", err)
		}
		if len(m.GetData()) > 0 {
			return m.GetData(), nil
		}
	}
}

func (c *hubChunks) Close() { c.finish() }

func newID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("request id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
