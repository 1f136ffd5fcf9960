package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/netns"
)

// DefaultOpTimeout bounds a driver's Signal, Recover and Destroy calls.
const DefaultOpTimeout = 30 * time.Second

// Config is what a Runner needs.
type Config struct {
	Spec TaskSpec
	// Drivers by name; a container whose driver is missing fails to start.
	Drivers map[string]driver.Driver
	// Report receives a snapshot of the task's state after changes, from
	// a goroutine of its own: a slow Report never holds the task up, but
	// snapshots that pile up behind it are coalesced into the newest (each
	// is complete, and Version tells them apart). The last state is always
	// reported before Run returns. Nil reports nothing.
	Report func(State)
	// Rand returns numbers in [0, 1) for restart jitter; nil uses
	// math/rand/v2.
	Rand func() float64
	// Logger takes what fails outside the task's state (a signal or destroy
	// that fails); nil discards.
	Logger *slog.Logger
	// OpTimeout bounds Signal, Recover and Destroy; zero means
	// DefaultOpTimeout.
	OpTimeout time.Duration
}

// Runner runs one task: it feeds events to Step and does the I/O Step
// decides, with the time package's clock (tests run it in a
// testing/synctest bubble).
type Runner struct {
	cfg    Config
	events chan Event
	stopCh chan struct{}

	mu         sync.Mutex
	stopReason string
	stopAsked  bool
	state      State
	ran        bool

	wg sync.WaitGroup // goroutines doing I/O for the current run
}

// NewRunner checks the spec and returns a runner for it.
func NewRunner(cfg Config) (*Runner, error) {
	st, err := NewState(cfg.Spec)
	if err != nil {
		return nil, err
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	return &Runner{
		cfg:    cfg,
		events: make(chan Event),
		stopCh: make(chan struct{}, 1),
		state:  st,
	}, nil
}

// Run starts the task and runs it until it is STOPPED and its containers
// destroyed (then it returns nil), or until ctx ends: then it returns
// ctx's error and leaves the containers running, so that an agent that
// restarts can Resume the last reported state.
func (r *Runner) Run(ctx context.Context) error {
	return r.run(ctx, newState(r.cfg.Spec), Tick{}) // NewRunner has validated the spec
}

// Resume runs a task from a state that an earlier agent reported: it
// re-attaches to the containers that were running (one that is gone counts
// as exited with an unknown code) and goes on as Run does.
func (r *Runner) Resume(ctx context.Context, st State) error {
	if err := st.CheckAgainst(r.cfg.Spec); err != nil {
		return fmt.Errorf("resuming task %s: %w", r.cfg.Spec.TaskID, err)
	}
	return r.run(ctx, st.Clone(), Resumed{})
}

// Stop asks the task to stop, for reason; the first reason given is kept.
// It is safe from any goroutine, before or during Run, and returns at once.
func (r *Runner) Stop(reason string) {
	r.mu.Lock()
	if !r.stopAsked {
		r.stopAsked = true
		r.stopReason = reason
	}
	r.mu.Unlock()
	select {
	case r.stopCh <- struct{}{}:
	default:
	}
}

// State returns the task's latest state.
func (r *Runner) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state.Clone()
}

func (r *Runner) run(ctx context.Context, st State, first Event) error {
	r.mu.Lock()
	if r.ran {
		r.mu.Unlock()
		return errors.New("a runner runs its task once")
	}
	r.ran = true
	r.state = st
	r.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rep := newReporter(r.cfg.Report)
	defer rep.close()

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()

	ev := first
	for {
		d := Step(r.cfg.Spec, st, ev, Env{Now: time.Now(), Rand: r.cfg.Rand()})
		changed := d.State.Version != st.Version
		st = d.State
		if changed {
			r.mu.Lock()
			r.state = st
			r.mu.Unlock()
			rep.publish(st.Clone())
		}
		for _, a := range d.Actions {
			r.act(ctx, a)
		}
		if st.Done() {
			return r.drain(ctx, cancel)
		}
		if !d.Wake.IsZero() {
			timer.Reset(time.Until(d.Wake))
		}
		select {
		case <-ctx.Done():
			cancel()
			r.wg.Wait()
			return ctx.Err()
		case ev = <-r.events:
		case <-timer.C:
			ev = Tick{}
		case <-r.stopCh:
			r.mu.Lock()
			ev = StopRequested{Reason: r.stopReason}
			r.mu.Unlock()
		}
		timer.Stop()
	}
}

// drain waits for the destroys of a stopped task; events that still come
// (a health probe that raced its container's exit) no longer matter.
func (r *Runner) drain(ctx context.Context, cancel context.CancelFunc) error {
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	for {
		select {
		case <-done:
			return nil
		case <-r.events:
		case <-ctx.Done():
			cancel()
			<-done
			return ctx.Err()
		}
	}
}

// send hands an event to the loop, unless ctx ends first.
func (r *Runner) send(ctx context.Context, ev Event) {
	select {
	case r.events <- ev:
	case <-ctx.Done():
	}
}

// act does one action in a goroutine of its own.
func (r *Runner) act(ctx context.Context, a Action) {
	cs, ok := r.containerSpec(a.Container)
	if !ok {
		return // Step names only the spec's containers.
	}
	drv, found := r.cfg.Drivers[cs.Driver]
	log := r.cfg.Logger.With("task", r.cfg.Spec.TaskID, "container", a.Container, "incarnation", a.Incarnation)
	r.wg.Go(func() {
		switch a.Kind {
		case ActStart:
			if !found {
				r.send(ctx, StartFailed{Container: a.Container, Incarnation: a.Incarnation,
					Err: fmt.Sprintf("driver %q is not available on this instance", cs.Driver)})
				return
			}
			if a.Previous != nil {
				r.destroy(ctx, drv, *a.Previous, log)
			}
			h, err := drv.Start(ctx, r.driverSpec(cs))
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				r.send(ctx, StartFailed{Container: a.Container, Incarnation: a.Incarnation, Err: err.Error()})
				return
			}
			r.send(ctx, Started{Container: a.Container, Incarnation: a.Incarnation, Handle: h})
			r.watch(ctx, cs, a.Incarnation, drv, h)
		case ActRecover:
			var err error
			if !found {
				err = fmt.Errorf("driver %q is not available on this instance", cs.Driver)
			} else {
				octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
				err = drv.Recover(octx, a.Handle)
				cancel()
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				if !errors.Is(err, driver.ErrGone) {
					log.Warn("could not recover container; counting it as exited", "err", err)
				}
				r.send(ctx, Exited{Container: a.Container, Incarnation: a.Incarnation,
					Exit: driver.Exit{Code: -1, Err: fmt.Errorf("lost while the agent was away: %w", err)}})
				return
			}
			r.watch(ctx, cs, a.Incarnation, drv, a.Handle)
		case ActSignal:
			if !found {
				return
			}
			octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
			defer cancel()
			if err := drv.Signal(octx, a.Handle, a.Signal); err != nil && ctx.Err() == nil {
				log.Warn("signal failed", "signal", a.Signal, "err", err)
			}
		case ActDestroy:
			if found {
				r.destroy(ctx, drv, a.Handle, log)
			}
		}
	})
}

func (r *Runner) destroy(ctx context.Context, drv driver.Driver, h driver.Handle, log *slog.Logger) {
	octx, cancel := context.WithTimeout(ctx, r.cfg.OpTimeout)
	defer cancel()
	if err := drv.Destroy(octx, h); err != nil && ctx.Err() == nil {
		log.Warn("destroy failed", "handle", h.ID, "err", err)
	}
}

// watch follows one incarnation of a container until it exits: it runs
// the health check meanwhile and reports the exit. When ctx ends (the agent
// is going away) it reports nothing: the container runs on.
func (r *Runner) watch(ctx context.Context, cs ContainerSpec, incarnation int, drv driver.Driver, h driver.Handle) {
	hctx, stopHealth := context.WithCancel(ctx)
	defer stopHealth()
	if cs.Health != nil {
		exec := func(ctx context.Context, cmd []string) (int, []byte, error) { return drv.Exec(ctx, h, cmd) }
		var dial health.DialFunc
		if cs.Spec.Netns != "" {
			// A bridge task listens in its namespace, not the agent's.
			dial = netns.Dialer(cs.Spec.Netns)
		}
		prober, err := health.NewProber(*cs.Health, exec, dial)
		if err != nil {
			r.cfg.Logger.Warn("health check cannot run", "task", r.cfg.Spec.TaskID, "container", cs.Name, "err", err)
		} else {
			started := time.Now()
			r.wg.Go(func() {
				health.Run(hctx, *cs.Health, prober, started, func(res health.Result) {
					r.send(hctx, Probed{Container: cs.Name, Incarnation: incarnation, Result: res})
				})
			})
		}
	}
	exit, err := drv.Wait(ctx, h)
	stopHealth()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		exit = driver.Exit{Code: -1, Err: fmt.Errorf("could not wait for the container: %w", err)}
	}
	r.send(ctx, Exited{Container: cs.Name, Incarnation: incarnation, Exit: exit})
}

func (r *Runner) containerSpec(name string) (ContainerSpec, bool) {
	for _, c := range r.cfg.Spec.Containers {
		if c.Name == name {
			return c, true
		}
	}
	return ContainerSpec{}, false
}

// driverSpec is what the driver starts for a container, named after the
// task so that the driver can find it again.
func (r *Runner) driverSpec(cs ContainerSpec) driver.Spec {
	s := cs.Spec
	if s.TaskID == "" {
		s.TaskID = r.cfg.Spec.TaskID
	}
	if s.TaskUID == "" {
		s.TaskUID = r.cfg.Spec.TaskUID
	}
	if s.Container == "" {
		s.Container = cs.Name
	}
	return s
}
