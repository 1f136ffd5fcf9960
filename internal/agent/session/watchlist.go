package session

import (
	"context"

	"google.golang.org/grpc"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

// Watch opens a WatchList stream on the server the session is connected
// to, waiting, as long as ctx lets it, for a connection: the session is a
// resource.Watcher, so that everything the agent follows (its informer)
// goes over the one link to the servers, and moves with it. The stream
// ends when the session leaves that server (the connection is closed), and
// its follower opens it again, on the next server, after the index it had
// seen.
func (s *Session) Watch(ctx context.Context, req *pbresource.WatchListRequest) (storage.Watch, error) {
	c, err := s.waitConn(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.res.WatchList(ctx, req)
	if err != nil {
		cancel()
		return nil, err
	}
	return &linkWatch{stream: stream, cancel: cancel}, nil
}

// waitConn returns the live connection, waiting for one until ctx ends.
func (s *Session) waitConn(ctx context.Context) (*conn, error) {
	for {
		s.mu.Lock()
		c, ch := s.current, s.changed
		s.mu.Unlock()
		if c != nil {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

// linkWatch is a WatchList stream of the session's server as a
// storage.Watch.
type linkWatch struct {
	stream grpc.ServerStreamingClient[pbresource.WatchEvent]
	cancel context.CancelFunc
}

// Next returns the stream's next event. The stream lives on the context
// Watch was given; a ctx of Next's own that ends first ends the stream.
func (w *linkWatch) Next(ctx context.Context) (*pbresource.WatchEvent, error) {
	defer context.AfterFunc(ctx, w.cancel)()
	return w.stream.Recv()
}

func (w *linkWatch) Close() { w.cancel() }
