package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// bootstrapper stores what must always exist (core.Bootstrap: the default
// Namespace) each time this server gains leadership, retrying with backoff
// while it stays leader. It is ready once the first leadership state has
// been handled: bootstrapped when leader, at once when not, so that an
// in-memory server opens its API with "default" already stored and a Raft
// follower does not wait.
type bootstrapper struct {
	api        resource.API
	leadership storage.Leadership
	log        *slog.Logger
	// bootstrap is core.Bootstrap; a field so tests can count calls.
	bootstrap func(context.Context, resource.API) error

	readyOnce sync.Once
	ready     chan struct{}
}

func newBootstrapper(api resource.API, l storage.Leadership, log *slog.Logger) *bootstrapper {
	return &bootstrapper{api: api, leadership: l, log: log, bootstrap: core.Bootstrap, ready: make(chan struct{})}
}

func (b *bootstrapper) Ready() <-chan struct{} { return b.ready }

func (b *bootstrapper) markReady() { b.readyOnce.Do(func() { close(b.ready) }) }

const (
	bootstrapMinBackoff = 100 * time.Millisecond
	bootstrapMaxBackoff = 10 * time.Second
)

func (b *bootstrapper) Start(ctx context.Context) error {
	ch := b.leadership.LeaderCh()
	for {
		var leader bool
		select {
		case <-ctx.Done():
			return nil
		case leader = <-ch:
		}
		if !leader {
			b.markReady()
			continue
		}
		// Leader: bootstrap until it works, leadership changes or ctx ends.
		retry := backoff.Waiter{Policy: backoff.Policy{Base: bootstrapMinBackoff, Max: bootstrapMaxBackoff}}
		for {
			err := b.bootstrap(ctx, b.api)
			if err == nil {
				b.log.Debug("bootstrap done")
				b.markReady()
				break
			}
			wait := retry.Next()
			b.log.Warn("bootstrap failed; retrying", "err", err, "in", wait)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case leader = <-ch:
				t.Stop()
			case <-t.C:
			}
			if !leader {
				b.markReady()
				break
			}
		}
	}
}
