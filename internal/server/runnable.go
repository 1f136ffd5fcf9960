package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Runnable is a long-lived part of the process. Start runs it and blocks
// until ctx ends (then it stops and returns nil) or it fails.
type Runnable interface {
	Start(ctx context.Context) error
}

// RunnableFunc adapts a function to Runnable.
type RunnableFunc func(ctx context.Context) error

// Start calls f.
func (f RunnableFunc) Start(ctx context.Context) error { return f(ctx) }

// Readier is a Runnable that needs time to come up: the group waits for
// Ready to be closed before it starts the next one (or gives up when the
// runnable fails first).
type Readier interface {
	Ready() <-chan struct{}
}

// ErrShutdownTimeout is wrapped when runnables did not stop in time.
var ErrShutdownTimeout = errors.New("shutdown timed out")

// Group runs runnables: each is started in the order added (after the one
// before it is ready, when it says when that is), and on shutdown they are
// stopped one by one in reverse order, so that what serves clients stops
// before what it depends on. Shutdown has a deadline; runnables that miss
// it are abandoned and named in the error.
type Group struct {
	items   []namedRunnable
	timeout time.Duration
	log     *slog.Logger
}

type namedRunnable struct {
	name string
	r    Runnable
}

// NewGroup returns an empty group whose shutdown takes at most timeout.
func NewGroup(timeout time.Duration, log *slog.Logger) *Group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Group{timeout: timeout, log: log}
}

// Add appends a runnable. Not safe once Start has been called.
func (g *Group) Add(name string, r Runnable) {
	g.items = append(g.items, namedRunnable{name: name, r: r})
}

// Names returns the runnables' names in start order.
func (g *Group) Names() []string {
	out := make([]string, len(g.items))
	for i, it := range g.items {
		out[i] = it.name
	}
	return out
}

type running struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

// Start starts every runnable and blocks until ctx ends or one of them
// fails; then it stops them all in reverse order. It returns the first
// failure (nil after a clean stop at ctx's end), joined with any shutdown
// timeout.
func (g *Group) Start(ctx context.Context) error {
	failed := make(chan *running, len(g.items))
	var started []*running
	var cause error

	for _, it := range g.items {
		rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		run := &running{name: it.name, cancel: cancel, done: make(chan struct{})}
		started = append(started, run)
		go func(r Runnable) {
			defer close(run.done)
			defer func() {
				if p := recover(); p != nil {
					run.err = fmt.Errorf("%s panicked: %v", run.name, p)
				}
				if run.err != nil || rctx.Err() == nil {
					failed <- run
				}
			}()
			run.err = r.Start(rctx)
		}(it.r)
		g.log.Debug("started", "runnable", it.name)

		if rd, ok := it.r.(Readier); ok {
		ready:
			for {
				select {
				case <-rd.Ready():
					break ready
				case f := <-failed:
					if f.err != nil || f == run {
						cause = runErr(f)
						break ready
					}
					g.log.Warn("runnable ended before shutdown", "runnable", f.name)
				case <-ctx.Done():
					break ready
				}
			}
		}
		if cause != nil || ctx.Err() != nil {
			break
		}
	}

	if cause == nil && ctx.Err() == nil {
	wait:
		for {
			select {
			case <-ctx.Done():
				break wait
			case f := <-failed:
				if f.err != nil {
					cause = runErr(f)
					break wait
				}
				g.log.Warn("runnable ended before shutdown", "runnable", f.name)
			}
		}
	}
	if cause != nil {
		g.log.Error("shutting down after a failure", "err", cause)
	}
	return errors.Join(cause, g.stop(started))
}

func runErr(r *running) error {
	if r.err == nil {
		return fmt.Errorf("%s ended before shutdown", r.name)
	}
	return fmt.Errorf("%s: %w", r.name, r.err)
}

// stop cancels the started runnables in reverse order, waiting for each
// until the shared deadline.
func (g *Group) stop(started []*running) error {
	deadline := time.NewTimer(g.timeout)
	defer deadline.Stop()
	expired := false
	var late []string
	for i := len(started) - 1; i >= 0; i-- {
		run := started[i]
		run.cancel()
		if expired {
			select {
			case <-run.done:
			default:
				late = append(late, run.name)
			}
			continue
		}
		select {
		case <-run.done:
			if run.err != nil {
				g.log.Warn("runnable failed while stopping", "runnable", run.name, "err", run.err)
			}
			g.log.Debug("stopped", "runnable", run.name)
		case <-deadline.C:
			expired = true
			late = append(late, run.name)
		}
	}
	if len(late) > 0 {
		return fmt.Errorf("%w after %s: still running: %v", ErrShutdownTimeout, g.timeout, late)
	}
	return nil
}
