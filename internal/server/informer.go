package server

import (
	"context"
	"math/rand/v2"
	"time"

	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/storage/inmem"
)

// newInformer makes the server's informer over its own store, which the
// modules declare their types in (module.Deps.Informer) and which runs
// on every server, followers too. Its consistent reads wait for the
// leader's read index as this server's store applies it; in memory the
// store's own index is the cluster's.
func (s *Server) newInformer() (*informer.Informer, error) {
	cfg := informer.Config{
		Source: s.api,
		Local:  true,
		// Its watches fail only while this server has not caught up with
		// a leader (each failure after the store's hold timeout) or is
		// stopping: retried soon, so that a server that has caught up
		// lists its types within seconds, not after a 30 s backoff.
		Retry:  backoff.Policy{Base: 100 * time.Millisecond, Max: 2 * time.Second},
		Rand:   rand.Float64,
		Logger: s.log.With("component", "informer"),
	}
	if s.raft != nil {
		b := s.raft.Backend()
		cfg.ReadIndex = func(ctx context.Context) (uint64, error) { return b.StoreReadIndex(ctx) }
	} else if b, ok := s.backend.(*inmem.Backend); ok {
		cfg.LocalIndex = b.Store().Index
	}
	return informer.New(cfg)
}
