package resource

import (
	pbresource "trellis.dev/trellis/api/resource/v1"
)

// The unary RPCs of pbresource.ResourceServiceServer are the API methods
// themselves (same names, same signatures); the caller's token is read from
// the TokenMetadataKey metadata when the context carries none (see
// callerContext). Only the stream needs its own method.

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
