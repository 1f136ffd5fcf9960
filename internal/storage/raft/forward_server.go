package raft

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
)

// RegisterGRPC mounts the forwarding service on s (the server-to-server
// gRPC server, -server-addr). Every server must serve it: followers
// forward to whichever server leads. Set grpc.MaxRecvMsgSize on s high
// enough for the largest write batch.
func (b *Backend) RegisterGRPC(s *grpc.Server) {
	pbstorage.RegisterForwardingServer(s, &forwardingServer{b: b})
}

// forwardingServer answers forwarded requests. It never forwards again: a
// server that is not the leader refuses with NOT_LEADER and the sender
// retries once it knows the new leader.
type forwardingServer struct {
	pbstorage.UnimplementedForwardingServer
	b *Backend
}

// listPageBytes bounds one page of a forwarded list.
const listPageBytes = 1 << 20

func (s *forwardingServer) Apply(ctx context.Context, req *pbstorage.ApplyRequest) (*pbstorage.ApplyResponse, error) {
	cmd := req.GetCommand()
	if !isResourceCommand(cmd) {
		return &pbstorage.ApplyResponse{Error: encodeError(invalid("only resource writes and deletes can be forwarded, not %s", opName(cmd)))}, nil
	}
	if err := checkCommand(cmd); err != nil {
		return &pbstorage.ApplyResponse{Error: encodeError(err)}, nil
	}
	if !s.b.IsLeader() {
		return &pbstorage.ApplyResponse{Error: encodeError(notLeader("%s is not the leader", s.b.cfg.ID))}, nil
	}
	out, err := s.b.applyLocal(ctx, cmd)
	return &pbstorage.ApplyResponse{Resources: out, Error: encodeError(err)}, nil
}

// Read and List never answer a sealed type (sealed.go): the type asked
// for is refused before anything is read, and what is read is checked
// again, so no id that resolves to a sealed resource carries it out.
func (s *forwardingServer) Read(ctx context.Context, req *pbstorage.ReadRequest) (*pbstorage.ReadResponse, error) {
	if s.b.sealed(req.GetId().GetType()) {
		return nil, sealedForwardError("Read", req.GetId().GetType())
	}
	if err := s.b.consistent(ctx); err != nil {
		return &pbstorage.ReadResponse{Error: encodeError(err)}, nil
	}
	res, err := s.b.store.Read(req.GetId())
	if res != nil && s.b.sealed(res.GetId().GetType()) {
		return nil, sealedForwardError("Read", res.GetId().GetType())
	}
	return &pbstorage.ReadResponse{Resource: res, Error: encodeError(err)}, nil
}

// ReadIndex answers the Raft index the leader's state machine has applied,
// once it has verified that it still leads: every write acknowledged
// before the call is at or below it.
func (s *forwardingServer) ReadIndex(ctx context.Context, _ *pbstorage.ReadIndexRequest) (*pbstorage.ReadIndexResponse, error) {
	if err := s.b.consistent(ctx); err != nil {
		return &pbstorage.ReadIndexResponse{Error: encodeError(err)}, nil
	}
	return &pbstorage.ReadIndexResponse{Index: s.b.fsm.applied.Load()}, nil
}

func (s *forwardingServer) List(req *pbstorage.ListRequest, stream pbstorage.Forwarding_ListServer) error {
	if s.b.sealed(req.GetType()) {
		return sealedForwardError("List", req.GetType())
	}
	if err := s.b.consistent(stream.Context()); err != nil {
		return stream.Send(&pbstorage.ListResponse{Error: encodeError(err)})
	}
	all, err := s.b.store.List(req.GetType(), req.GetTenancy(), req.GetNamePrefix())
	if err != nil {
		return stream.Send(&pbstorage.ListResponse{Error: encodeError(err)})
	}
	for _, res := range all {
		if s.b.sealed(res.GetId().GetType()) {
			return sealedForwardError("List", res.GetId().GetType())
		}
	}
	return sendPages(all, func(page []*pbresource.Resource) error {
		return stream.Send(&pbstorage.ListResponse{Resources: page})
	})
}

// sendPages sends resources in pages of about listPageBytes (at least one
// resource a page), and one empty page when there are none.
func sendPages(all []*pbresource.Resource, send func([]*pbresource.Resource) error) error {
	if len(all) == 0 {
		return send(nil)
	}
	start, size := 0, 0
	for i, res := range all {
		size += proto.Size(res)
		if size >= listPageBytes || i == len(all)-1 {
			if err := send(all[start : i+1]); err != nil {
				return err
			}
			start, size = i+1, 0
		}
	}
	return nil
}

func (s *forwardingServer) Snapshot(_ *pbstorage.SnapshotRequest, stream pbstorage.Forwarding_SnapshotServer) error {
	ctx := stream.Context()
	if err := s.b.consistent(ctx); err != nil {
		return stream.Send(&pbstorage.SnapshotChunk{Error: encodeError(err)})
	}
	w := &chunkWriter{send: func(p []byte) error { return stream.Send(&pbstorage.SnapshotChunk{Data: p}) }}
	if err := s.b.writeUserSnapshot(w); err != nil {
		if errors.Is(err, errChunkSend) {
			return err
		}
		return stream.Send(&pbstorage.SnapshotChunk{Error: encodeError(err)})
	}
	return w.flush()
}

func (s *forwardingServer) Restore(stream pbstorage.Forwarding_RestoreServer) error {
	if !s.b.IsLeader() {
		return stream.SendAndClose(&pbstorage.RestoreResponse{Error: encodeError(notLeader("%s is not the leader", s.b.cfg.ID))})
	}
	r := &chunkReader{recv: func() ([]byte, error) {
		c, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		return c.GetData(), nil
	}}
	err := s.b.restoreLocal(stream.Context(), r)
	return stream.SendAndClose(&pbstorage.RestoreResponse{Error: encodeError(err)})
}

// chunkWriter cuts a byte stream into messages of snapshotChunkSize.
type chunkWriter struct {
	send func([]byte) error
	buf  []byte
}

const snapshotChunkSize = 512 << 10

var errChunkSend = errors.New("sending snapshot chunk")

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		room := snapshotChunkSize - len(w.buf)
		take := min(room, len(p))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == snapshotChunkSize {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if err := w.send(w.buf); err != nil {
		return errors.Join(errChunkSend, err)
	}
	w.buf = make([]byte, 0, snapshotChunkSize)
	return nil
}

// chunkReader reads a byte stream from messages.
type chunkReader struct {
	recv func() ([]byte, error)
	buf  []byte
	err  error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		r.buf, r.err = r.recv()
		if r.err != nil && !errors.Is(r.err, io.EOF) {
			return 0, r.err
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}
