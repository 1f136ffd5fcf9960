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
// GRPC returns the face to register on a gRPC server: the same methods,
// except that the resources they answer with are the backend's own rather
// than copies. The API methods copy what they return so that an in-process
// caller changing a result cannot change the store; a gRPC response is only
// encoded, never changed, so the copy (a deep clone of every resource, for
// a batch of 1,000 a thousand of them) is saved.

// GRPC returns the service as a gRPC server; see above.
func (s *Service) GRPC() pbresource.ResourceServiceServer { return grpcFace{s} }

type grpcFace struct{ *Service }

func (g grpcFace) Write(ctx context.Context, req *pbresource.WriteRequest) (*pbresource.WriteResponse, error) {
	out, err := g.write(ctx, req)
	if err != nil {
		return nil, g.errs.toStatus("write", err)
	}
	return &pbresource.WriteResponse{Resource: out}, nil
}

func (g grpcFace) WriteBatch(ctx context.Context, req *pbresource.WriteBatchRequest) (*pbresource.WriteBatchResponse, error) {
	out, err := g.writeBatch(ctx, req)
	if err != nil {
		return nil, g.errs.toStatus("write batch", err)
	}
	return &pbresource.WriteBatchResponse{Resources: out}, nil
}

func (g grpcFace) Read(ctx context.Context, req *pbresource.ReadRequest) (*pbresource.ReadResponse, error) {
	out, err := g.read(ctx, req)
	if err != nil {
		return nil, g.errs.toStatus("read", err)
	}
	return &pbresource.ReadResponse{Resource: out}, nil
}

func (g grpcFace) List(ctx context.Context, req *pbresource.ListRequest) (*pbresource.ListResponse, error) {
	out, err := g.list(ctx, req)
	if err != nil {
		return nil, g.errs.toStatus("list", err)
	}
	return &pbresource.ListResponse{Resources: out}, nil
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
