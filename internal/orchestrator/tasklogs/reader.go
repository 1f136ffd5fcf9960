package tasklogs

import (
	"context"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
)

// Reader opens reads of task logs on a server: through its own Hub when
// the agent is attached here, else through the server that holds it
// (Route).
type Reader struct {
	Hub *Hub
	// Self is this server's server-to-server address; Servers returns
	// every server's (nil in memory, where there is no other server);
	// Conn returns a connection to one of them.
	Self    string
	Servers func() []string
	Conn    func(addr string) (grpc.ClientConnInterface, error)
	// OpenTimeout bounds the wait for another server's first answer
	// (DefaultAnswerTimeout plus a margin when zero).
	OpenTimeout time.Duration
}

// Open starts a read. The Chunks end with io.EOF at the end of the logs;
// Close ends the read.
func (r *Reader) Open(ctx context.Context, req *pbagent.LogRequest) (Chunks, error) {
	if err := CheckRequest(req); err != nil {
		return nil, err
	}
	var servers []string
	if r.Servers != nil && r.Conn != nil {
		servers = r.Servers()
	}
	var last error
	for _, t := range Route(r.Hub.Attached(req.GetInstance()), false, r.Self, servers) {
		var c Chunks
		var err error
		if t.Local {
			c, err = r.Hub.Open(ctx, req)
		} else {
			c, err = r.openRemote(ctx, t.Addr, req)
		}
		if err == nil {
			return c, nil
		}
		if !TryNext(err) || ctx.Err() != nil {
			return nil, err
		}
		last = err
	}
	if last != nil && !IsNotAttached(last) {
		return nil, status.Errorf(codes.Unavailable, "the agent of instance %s is attached to no server that answered (last: %v)", req.GetInstance(), status.Convert(last).Message())
	}
	return nil, status.Errorf(codes.Unavailable, "the agent of instance %s is not connected to any server: is it running?", req.GetInstance())
}

// openRemote reads through another server's ReadLogs, which answers an
// empty chunk first once the agent has said the logs are coming.
func (r *Reader) openRemote(ctx context.Context, addr string, req *pbagent.LogRequest) (Chunks, error) {
	cc, err := r.Conn(addr)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "server %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := pbagent.NewServerLogServiceClient(cc).ReadLogs(ctx, req)
	if err != nil {
		cancel()
		return nil, err
	}
	timeout := r.OpenTimeout
	if timeout <= 0 {
		timeout = DefaultAnswerTimeout + 5*time.Second
	}
	timer := time.AfterFunc(timeout, cancel)
	_, err = stream.Recv()
	if !timer.Stop() {
		return nil, status.Errorf(codes.Unavailable, "server %s did not answer within %s", addr, timeout)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &remoteChunks{stream: stream, cancel: cancel}, nil
}

type remoteChunks struct {
	stream pbagent.ServerLogService_ReadLogsClient
	cancel context.CancelFunc
}

func (c *remoteChunks) Next() ([]byte, error) {
	for {
		m, err := c.stream.Recv()
		if err != nil {
			return nil, err
		}
		if len(m.GetData()) > 0 {
			return m.GetData(), nil
		}
	}
}

func (c *remoteChunks) Close() { c.cancel() }

// ReadLogs serves ServerLogService.ReadLogs: a read another server
// forwarded here, served through this server's Hub alone.
func (h *Hub) ReadLogs(req *pbagent.LogRequest, stream pbagent.ServerLogService_ReadLogsServer) error {
	c, err := h.Open(stream.Context(), req)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := stream.Send(&pbagent.LogChunk{}); err != nil {
		return err
	}
	for {
		data, err := c.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := stream.Send(&pbagent.LogChunk{Data: data}); err != nil {
			return err
		}
	}
}
