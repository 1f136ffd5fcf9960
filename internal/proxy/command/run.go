package command

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/proxy"
)

// DefaultDrainTimeout bounds the drain after SIGTERM: below the
// lifecycle's default stop timeout (30 s), so that the proxy exits on its
// own before the agent kills it.
const DefaultDrainTimeout = 20 * time.Second

// redial paces the reconnects to the agent's socket.
var redial = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}

// Config is what `trellis proxy` runs with.
type Config struct {
	// Socket is the agent's Unix socket serving ProxyService.
	Socket string
	// Task is the name of the task the proxy serves (its resource name).
	Task string
	// DrainTimeout bounds the drain once ctx ends; DefaultDrainTimeout
	// when zero.
	DrainTimeout time.Duration
	// Drain, when it is closed or receives, starts the drain while the
	// proxy keeps serving the app's outbound traffic (the agent's drain
	// signal, sent as the task begins to stop); nil: only at ctx's end.
	Drain <-chan struct{}
	Log   *slog.Logger
}

func (c Config) check() error {
	switch {
	case c.Socket == "":
		return errors.New("-socket: required: the agent's socket in the task's directory")
	case c.Task == "":
		return errors.New("-task: required: the name of the task the proxy serves")
	case c.DrainTimeout < 0:
		return fmt.Errorf("-drain-timeout: %s is negative", c.DrainTimeout)
	}
	return nil
}

// Run runs the proxy of cfg.Task until ctx ends, then drains and returns
// nil; it returns an error when the proxy cannot serve (a listener of one
// of its components fails).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.check(); err != nil {
		return err
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	p, err := proxy.New(proxy.Config{Log: cfg.Log.With("task", cfg.Task)})
	if err != nil {
		return err
	}
	return run(ctx, cfg, p)
}

// run is Run with its proxy made.
func run(ctx context.Context, cfg Config, p *proxy.Proxy) error {
	log := cfg.Log.With("task", cfg.Task)
	conn, err := grpc.NewClient("unix://"+cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("-socket: %w", err)
	}
	defer conn.Close()

	// The proxy serves on its own context, which ends only after the
	// drain; the watch ends with ctx.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	served := make(chan error, 1)
	go func() { served <- p.Run(serveCtx) }()
	if cfg.Drain != nil {
		go func() {
			select {
			case <-cfg.Drain:
				p.Drain()
			case <-serveCtx.Done():
			}
		}()
	}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watch(ctx, pbproxy.NewProxyServiceClient(conn), cfg.Task, p, log)
	}()

	select {
	case err := <-served:
		// A component failed (or the proxy stopped) before any SIGTERM.
		stopServing()
		<-watched
		if err == nil {
			err = errors.New("the proxy stopped serving")
		}
		return err
	case <-ctx.Done():
	}
	<-watched
	// The inbound listener closes, so that new connections go to another
	// instance; the connections open finish, within the bound.
	p.Drain()
	drainCtx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	left := drain(drainCtx, func() int { return activeConnections(p) })
	if left > 0 {
		log.Warn("proxy: drain timeout: closing the connections left", "connections", left, "timeout", cfg.DrainTimeout)
	} else {
		log.Info("proxy: drained")
	}
	stopServing()
	return <-served
}

// watch follows the task's snapshots until ctx ends, applying each; the
// stream is redialled with backoff whenever it ends. A snapshot the proxy
// refuses leaves the previous one in place (Update logs and counts it).
func watch(ctx context.Context, client pbproxy.ProxyServiceClient, task string, p *proxy.Proxy, log *slog.Logger) {
	w := backoff.Waiter{Policy: redial, Rand: rand.Float64}
	for {
		err := watchOnce(ctx, client, task, p, w.Reset)
		if ctx.Err() != nil {
			return
		}
		log.Warn("proxy: the agent's snapshot stream is down; serving the last snapshot", "err", err, "failures", w.Failures()+1)
		if !w.Wait(ctx) {
			return
		}
	}
}

// watchOnce reads one stream until it ends, calling received after each
// snapshot.
func watchOnce(ctx context.Context, client pbproxy.ProxyServiceClient, task string, p *proxy.Proxy, received func()) error {
	stream, err := client.Watch(ctx, &pbproxy.WatchRequest{Task: task})
	if err != nil {
		return err
	}
	for {
		snap, err := stream.Recv()
		if err != nil {
			return err
		}
		received()
		_ = p.Update(snap) // a refusal is logged and counted by the proxy
	}
}
