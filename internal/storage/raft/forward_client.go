package raft

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/storage"
)

// maxForwardMsg bounds a forwarded message in either direction: a batch of
// resources can be large. The server side's limit is the gRPC server's
// (grpc.MaxRecvMsgSize), which the process sets.
const maxForwardMsg = 256 << 20

// connPool keeps one client connection per server gRPC address. gRPC
// connections reconnect by themselves, so a connection lives until the
// backend shuts down.
type connPool struct {
	opts   []grpc.DialOption
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newConnPool(opts []grpc.DialOption) *connPool {
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	opts = append(append([]grpc.DialOption(nil), opts...),
		grpc.WithStatsHandler(sentTracker{}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxForwardMsg), grpc.MaxCallSendMsgSize(maxForwardMsg)),
	)
	return &connPool{opts: opts, conns: map[string]*grpc.ClientConn{}}
}

func (p *connPool) get(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrShutdown
	}
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, notLeader("cannot dial the leader at %s: %v", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// live returns the connection to a server that Raft has just heard from
// (the leader), ready to be tried at once: one that failed while the
// server was down (killed, restarting) waits out gRPC's reconnect backoff,
// which grows to two minutes, and fails every call meanwhile. Without
// this, a server that came back after a while and was then elected could
// not be forwarded to for as long as that backoff.
func (p *connPool) live(addr string) (*grpc.ClientConn, error) {
	c, err := p.get(addr)
	if err != nil {
		return nil, err
	}
	if c.GetState() == connectivity.TransientFailure {
		c.ResetConnectBackoff()
	}
	return c, nil
}

func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// sentTracker is a gRPC stats handler that records whether a call's
// request message was handed to the transport. A call that failed before
// that cannot have reached the leader, so it is safe to retry; one that
// failed after may have been applied.
type sentTracker struct{}

type sentKey struct{}

// trackSent returns a context whose calls record in the returned flag
// whether their request was sent.
func trackSent(ctx context.Context) (context.Context, *atomic.Bool) {
	sent := new(atomic.Bool)
	return context.WithValue(ctx, sentKey{}, sent), sent
}

func (sentTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (sentTracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if _, ok := s.(*stats.OutPayload); ok {
		if sent, ok := ctx.Value(sentKey{}).(*atomic.Bool); ok {
			sent.Store(true)
		}
	}
}
func (sentTracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (sentTracker) HandleConn(context.Context, stats.ConnStats)                       {}

// applyRemote forwards a resource command to the leader.
func (b *Backend) applyRemote(ctx context.Context, conn *grpc.ClientConn, cmd *pbstorage.Command) ([]*pbresource.Resource, error) {
	start := time.Now()
	tctx, sent := trackSent(ctx)
	resp, err := pbstorage.NewForwardingClient(conn).Apply(tctx, &pbstorage.ApplyRequest{Command: cmd})
	b.metrics.forward.WithLabelValues("apply").Observe(time.Since(start).Seconds())
	if err != nil {
		if !sent.Load() {
			return nil, notLeader("the leader could not be reached (nothing was sent): %v", err)
		}
		return nil, outcomeUnknown("the connection to the leader failed while the write was in flight", err)
	}
	if rerr := decodeError(resp.GetError()); rerr != nil {
		return nil, rerr
	}
	return resp.GetResources(), nil
}

// readRemote forwards a strong read. Reads have no effect, so any
// transport failure is retried (reported as ErrNotLeader).
func (b *Backend) readRemote(ctx context.Context, conn *grpc.ClientConn, id *pbresource.ID) (*pbresource.Resource, error) {
	start := time.Now()
	resp, err := pbstorage.NewForwardingClient(conn).Read(ctx, &pbstorage.ReadRequest{Id: id})
	b.metrics.forward.WithLabelValues("read").Observe(time.Since(start).Seconds())
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", storage.ErrUnavailable, ctx.Err())
		}
		return nil, notLeader("forwarding the read to the leader failed: %v", err)
	}
	if rerr := decodeError(resp.GetError()); rerr != nil {
		return nil, rerr
	}
	return resp.GetResource(), nil
}

// listRemote forwards a strong list; the leader streams it in pages.
func (b *Backend) listRemote(ctx context.Context, conn *grpc.ClientConn, req *pbstorage.ListRequest) ([]*pbresource.Resource, error) {
	start := time.Now()
	defer func() { b.metrics.forward.WithLabelValues("list").Observe(time.Since(start).Seconds()) }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pbstorage.NewForwardingClient(conn).List(ctx, req)
	if err != nil {
		return nil, notLeader("forwarding the list to the leader failed: %v", err)
	}
	var out []*pbresource.Resource
	for {
		page, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: %w", storage.ErrUnavailable, ctx.Err())
			}
			return nil, notLeader("forwarded list from the leader failed: %v", err)
		}
		if rerr := decodeError(page.GetError()); rerr != nil {
			return nil, rerr
		}
		out = append(out, page.GetResources()...)
	}
}
