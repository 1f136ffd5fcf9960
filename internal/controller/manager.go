package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// Config is what a Manager needs.
type Config struct {
	// Client is the resource service the controllers watch, list and write
	// through. Required.
	Client resource.API
	// Leadership says when this server may run controllers. Required.
	Leadership storage.Leadership
	// Token, when set, is the ACL token the Manager's own calls (watches,
	// resync lists) and every Reconcile's context carry.
	Token string
	// Cache is where the Manager's watches keep the types the controllers
	// declare in Controller.Cached; nil makes a new one (Manager.Cache).
	Cache *Cache
	// Registerer receives the controller metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger; nil discards.
	Logger *slog.Logger
}

var (
	// ErrStarted: controllers are registered before Start.
	ErrStarted = errors.New("controller manager already started: register controllers before Start")
	// ErrDuplicateController: two controllers share a name.
	ErrDuplicateController = errors.New("a controller with that name is already registered")
)

// Manager runs controllers while this server is the leader.
type Manager struct {
	cfg     Config
	logger  *slog.Logger
	metrics *metrics

	mu          sync.Mutex
	controllers []Controller
	started     bool
}

// NewManager returns a Manager with no controllers. It fails only when its
// metrics cannot be registered.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Client == nil {
		return nil, errors.New("controller manager: Config.Client is required")
	}
	if cfg.Leadership == nil {
		return nil, errors.New("controller manager: Config.Leadership is required")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	if cfg.Cache == nil {
		cfg.Cache = NewCache()
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newCacheCollector(cfg.Cache)); err != nil {
			return nil, fmt.Errorf("controller manager: cache metrics: %w", err)
		}
	}
	return &Manager{cfg: cfg, logger: logger, metrics: m}, nil
}

// Cache returns the cache the Manager's watches feed.
func (m *Manager) Cache() *Cache { return m.cfg.Cache }

// Register adds a controller. Its declaration is checked (errors wrap
// ErrInvalidController and name the field) and its defaults filled.
func (m *Manager) Register(c Controller) error {
	if err := c.validate(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return ErrStarted
	}
	for _, other := range m.controllers {
		if other.Name == c.Name {
			return fmt.Errorf("%w: %s", ErrDuplicateController, c.Name)
		}
	}
	if err := m.cfg.Cache.Declare(c.Cached...); err != nil {
		return fmt.Errorf("%w %s: Cached: %w", ErrInvalidController, c.Name, err)
	}
	m.controllers = append(m.controllers, c)
	return nil
}

// Start follows the leadership channel until ctx ends: on gaining
// leadership it starts every controller (the watches open with a full list,
// so every managed resource is reconciled once), on losing it it stops them
// (cancels their context and waits for the reconciles in flight), and on
// regaining it starts them afresh. It returns nil once ctx has ended and
// every controller has stopped.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return errors.New("controller manager: Start called twice")
	}
	m.started = true
	controllers := m.controllers
	m.mu.Unlock()

	if m.cfg.Token != "" {
		ctx = resource.ContextWithToken(ctx, m.cfg.Token)
	}
	leaderCh := m.cfg.Leadership.LeaderCh()
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case leader, ok := <-leaderCh:
			if !ok {
				// The backend is closing: run nothing more.
				leaderCh, leader = nil, false
			}
			switch {
			case leader && stop == nil:
				m.logger.Info("gained leadership, starting controllers", "controllers", len(controllers))
				stop = m.startTerm(ctx, controllers)
			case !leader && stop != nil:
				m.logger.Info("lost leadership, stopping controllers")
				stop()
				stop = nil
				m.logger.Info("controllers stopped")
			}
		}
	}
}

// startTerm starts the controllers and their watches, one informer per
// watched type, and returns the function that stops them and waits.
func (m *Manager) startTerm(ctx context.Context, controllers []Controller) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	informers := make(map[string]*informer)
	var order []*informer
	// The cached types get an informer each, which applies every event to
	// the cache before any handler maps it.
	m.cfg.Cache.reset()
	for _, tc := range m.cfg.Cache.cachedTypes() {
		in := newInformer(m.cfg.Client, tc.typ, m.logger, m.metrics)
		in.cache = tc
		informers[ids.TypeString(tc.typ)] = in
		order = append(order, in)
	}
	runners := make([]*runner, 0, len(controllers))
	for _, c := range controllers {
		if c.OnStart != nil {
			c.OnStart()
		}
		r := newRunner(c, m.cfg.Client, m.logger, m.metrics)
		r.cache = m.cfg.Cache
		for _, w := range c.watches() {
			k := ids.TypeString(w.Type)
			in := informers[k]
			if in == nil {
				in = newInformer(m.cfg.Client, w.Type, m.logger, m.metrics)
				informers[k] = in
				order = append(order, in)
			}
			r.subscribe(w, in)
		}
		runners = append(runners, r)
	}

	var wg sync.WaitGroup
	stopped := make([]chan struct{}, len(runners))
	for i, r := range runners {
		stopped[i] = make(chan struct{})
		wg.Go(func() {
			defer close(stopped[i])
			// A controller that reads the cache starts once what it reads
			// is listed whole; its queue fills meanwhile.
			if !m.cfg.Cache.waitSynced(ctx, r.ctl.Cached) {
				// The term ended first: its queue goes with it.
				m.metrics.depth.WithLabelValues(r.ctl.Name).Set(0)
				return
			}
			r.run(ctx)
		})
	}
	for _, in := range order {
		wg.Go(func() { in.run(ctx) })
	}
	m.metrics.leader.Set(1)
	return func() {
		cancel()
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		// Waiting is what keeps two leaders' reconciles apart, so it has no
		// deadline; a reconcile that ignores its context is named instead.
		tick := time.NewTicker(stopWarnInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				m.metrics.leader.Set(0)
				// A follower reads nothing from the cache: free it.
				m.cfg.Cache.reset()
				return
			case <-tick.C:
				var stuck []string
				for i, ch := range stopped {
					select {
					case <-ch:
					default:
						stuck = append(stuck, runners[i].ctl.Name)
					}
				}
				m.logger.Warn("controllers still stopping: a reconcile does not return after its context ended", "controllers", stuck)
			}
		}
	}
}

// stopWarnInterval is how often stopping controllers that have not stopped
// is reported.
const stopWarnInterval = 30 * time.Second
