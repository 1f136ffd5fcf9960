package resource

import (
	"context"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// The unary RPCs of pbresource.ResourceServiceServer are the API methods
// themselves (same names, same signatures); the caller's token is read from
// the TokenMetadataKey metadata when the context carries none (see
// callerContext). Only the stream needs its own method.
//
// Both faces answer through answers: the API methods copy what they
// return, so that an in-process caller changing a result cannot change
// the store; the face GRPC returns answers with the backend's own
// resources, since a gRPC response is only encoded, never changed, and the
// copy (a deep clone of every resource, for a batch of 1,000 a thousand of
// them) is saved.

// GRPC returns the service as a gRPC server; see above.
func (s *Service) GRPC() pbresource.ResourceServiceServer { return answers{s, false} }

// answers answers the unary calls; copies says whether it copies the
// stored resources it answers with.
type answers struct {
	*Service
	copies bool
}

func (a answers) one(res *pbresource.Resource) *pbresource.Resource {
	if a.copies {
		return clone(res)
	}
	return res
}

func (a answers) all(rs []*pbresource.Resource) []*pbresource.Resource {
	if a.copies {
		return cloneAll(rs)
	}
	return rs
}

func (a answers) Write(ctx context.Context, req *pbresource.WriteRequest) (*pbresource.WriteResponse, error) {
	out, err := a.write(ctx, req)
	if err != nil {
		return nil, a.errs.toStatus("write", err)
	}
	return &pbresource.WriteResponse{Resource: a.one(out)}, nil
}

func (a answers) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	out, err := a.writeBatch(ctx, req)
	if err != nil {
		return nil, a.errs.toStatus("write batch", err)
	}
	n := len(req.GetResources())
	resp := &pbresource.WriteBatchResponse{Resources: a.all(out[:n])}
	if n < len(out) {
		resp.Statuses = a.all(out[n:])
	}
	return resp, nil
}

func (a answers) Read(ctx context.Context, req *pbresource.ReadRequest) (*pbresource.ReadResponse, error) {
	out, err := a.read(ctx, req)
	if err != nil {
		return nil, a.errs.toStatus("read", err)
	}
	return &pbresource.ReadResponse{Resource: a.one(out)}, nil
}

func (a answers) List(ctx context.Context, req *pbresource.ListRequest) (*pbresource.ListResponse, error) {
	out, err := a.list(ctx, req)
	if err != nil {
		return nil, a.errs.toStatus("list", err)
	}
	return &pbresource.ListResponse{Resources: a.all(out)}, nil
}

// WatchList streams the events of Watch to a gRPC client until the client
// goes away or the watch ends; the stream's error is the watch's status
// error (OutOfRange: re-list).
func (s *Service) WatchList(req *pbresource.WatchListRequest, stream pbresource.ResourceService_WatchListServer) error {
	ctx := stream.Context()
	w, err := s.watch(ctx, req, false)
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return err
		}
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
}
