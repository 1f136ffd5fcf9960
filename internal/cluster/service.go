package cluster

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pbcluster "trellis.dev/trellis/api/cluster/v1"
	"trellis.dev/trellis/internal/storage"
	raftstore "trellis.dev/trellis/internal/storage/raft"
)

// service is the cluster gRPC service.
type service struct {
	pbcluster.UnimplementedClusterServer
	c *Cluster
}

func (s *service) Info(_ context.Context, req *pbcluster.InfoRequest) (*pbcluster.InfoResponse, error) {
	c := s.c
	if from := req.GetFrom(); from != nil {
		if err := checkServer("from", from); err != nil {
			return nil, err
		}
		c.disc.learn(peerFrom(from), req.GetFromHasState(), req.GetKnown())
		select {
		case c.learned <- struct{}{}:
		default:
		}
	}
	leaderID, _ := c.b.Leader()
	resp := &pbcluster.InfoResponse{Server: c.self.proto(), HasState: c.b.HasState(), LeaderId: leaderID}
	if !resp.HasState {
		resp.Known = c.disc.knownFresh()
	}
	return resp, nil
}

func (s *service) Join(ctx context.Context, req *pbcluster.JoinRequest) (*pbcluster.JoinResponse, error) {
	c := s.c
	if err := checkServer("server", req.GetServer()); err != nil {
		return nil, err
	}
	srv := raftstore.Server{ID: req.GetServer().GetId(), RaftAddr: req.GetServer().GetRaftAddr(), ServerAddr: req.GetServer().GetServerAddr()}
	if c.b.IsLeader() {
		if err := c.joinLocal(ctx, srv); err != nil {
			return nil, ToStatus(err)
		}
		return &pbcluster.JoinResponse{}, nil
	}
	if req.GetForwarded() {
		return nil, status.Errorf(codes.Unavailable, "%s is not the leader (any more)", c.self.ID)
	}
	conn, err := c.b.LeaderConn()
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "no leader to forward the join to: %v", err)
	}
	return pbcluster.NewClusterClient(conn).Join(ctx, &pbcluster.JoinRequest{Server: req.GetServer(), Forwarded: true})
}

func (s *service) RemovePeer(ctx context.Context, req *pbcluster.RemovePeerRequest) (*pbcluster.RemovePeerResponse, error) {
	c := s.c
	if req.GetIdOrAddress() == "" {
		return nil, status.Error(codes.InvalidArgument, "id_or_address: name the server to remove")
	}
	if c.b.IsLeader() {
		id, err := c.removeLocal(ctx, req.GetIdOrAddress())
		if err != nil {
			return nil, ToStatus(err)
		}
		return &pbcluster.RemovePeerResponse{Id: id}, nil
	}
	if req.GetForwarded() {
		return nil, status.Errorf(codes.Unavailable, "%s is not the leader (any more)", c.self.ID)
	}
	id, err := c.RemovePeer(ctx, req.GetIdOrAddress())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &pbcluster.RemovePeerResponse{Id: id}, nil
}

// checkServer refuses a server description missing an address.
func checkServer(field string, s *pbcluster.Server) error {
	switch {
	case s == nil:
		return status.Errorf(codes.InvalidArgument, "%s is missing", field)
	case s.GetId() == "":
		return status.Errorf(codes.InvalidArgument, "%s.id is empty", field)
	case !nodeIDPattern.MatchString(s.GetId()):
		return status.Errorf(codes.InvalidArgument, "%s.id %q is not a node id", field, s.GetId())
	case s.GetRaftAddr() == "":
		return status.Errorf(codes.InvalidArgument, "%s.raft_addr is empty", field)
	case s.GetServerAddr() == "":
		return status.Errorf(codes.InvalidArgument, "%s.server_addr is empty", field)
	}
	return nil
}

// ToStatus maps an error of this package's API (RemovePeer, Snapshot,
// Restore, ...) to a gRPC status error, for the HTTP and gRPC faces:
// NotFound for an unknown server, InvalidArgument for bad input or a bad
// snapshot file, Unavailable when there is no leader (retry), Internal
// otherwise. A status error passes through; nil stays nil.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, ErrPeerNotFound):
		code = codes.NotFound
	case errors.Is(err, raftstore.ErrInvalidRequest), errors.Is(err, raftstore.ErrBadSnapshot):
		code = codes.InvalidArgument
	case errors.Is(err, raftstore.ErrNotLeader), errors.Is(err, storage.ErrUnavailable):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

// fromStatus maps a gRPC status from another server back to our errors.
func fromStatus(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %v", ErrNoLeader, err)
	}
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("%w: %s", ErrPeerNotFound, st.Message())
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %s", raftstore.ErrInvalidRequest, st.Message())
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return fmt.Errorf("%w: %s", ErrNoLeader, st.Message())
	}
	return errors.New(st.Message())
}

func defaultDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
}
