package tasks

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/driver"
)

// Config says how to manage the tasks of one instance.
type Config struct {
	// Instance is the name of the instance the tasks are placed on.
	Instance string
	// DataDir keeps the local state: the tasks' records, directories and
	// logs. It must be absolute: the drivers run processes in other
	// working directories.
	DataDir string
	// Drivers are the task drivers by name, handed to the runners and swept
	// for orphans at start.
	Drivers map[string]driver.Driver
	// NewRunner makes the runner of one task. Required.
	NewRunner NewRunnerFunc
	// Admit, when set, is asked before a task starts; see AdmitFunc.
	Admit AdmitFunc
	// Network gives bridge tasks their network namespaces; nil: bridge
	// tasks cannot run here (they stop, saying so).
	Network Networks
	// Hooks are the agent's components' per-task hooks, in the order
	// their Prestarts run (hooks.go).
	Hooks []Hooks
	// LocalAddr is the local API's address on this host: the metadata URI
	// each task gets points there.
	LocalAddr string
	// Session is the server session id the first reports carry (Resync
	// sets the next ones).
	Session string

	Logger *slog.Logger
	Clock  Clock
}

// Clock is the task manager's time source.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// DefinitionReader reads a task definition from the servers: namespace
// ns's family:revision ref. It is the only call the task manager makes to
// them, to start a task whose definition the task stream did not carry.
type DefinitionReader func(ctx context.Context, ns, ref string) (*pborch.TaskDefinition, error)

// Manager is the task manager of one agent: see the package comment. Its
// fields are guarded by mu unless said otherwise.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	clock Clock
	state stateDir

	mu       sync.Mutex
	tasks    map[string]*task // by uid
	byName   map[string]*task // "namespace/name" → the newest task of that name
	tokens   map[string]*task // metadata token → task
	finished []*task          // forgotten tasks kept for their logs and metadata
	gone     uidSet           // uids of forgotten tasks, whose stale events are ignored
	session  string
	leaving  bool
	defs     map[string]*pborch.TaskDefinition
	link     *link         // the attached server session, nil between them
	changed  chan struct{} // closed and replaced at every change, for waiters

	reportCh chan struct{}
	runCtx   context.Context
	runners  sync.WaitGroup
}

// link is an attached server session: starts resolve their definitions
// through it, and it is detached only once the starts made on it have
// given up, so that the next session's resync sees the tasks they dropped
// as idle and starts them again.
type link struct {
	ctx    context.Context
	read   DefinitionReader
	starts sync.WaitGroup
}

// finishedKept is how many stopped tasks the manager keeps in memory (and
// on disk: their directories and logs) after the store shows them stopped.
const finishedKept = 64

// New checks the configuration and prepares the data dir.
func New(cfg Config) (*Manager, error) {
	if cfg.NewRunner == nil {
		return nil, errors.New("tasks: NewRunner is required")
	}
	if cfg.DataDir == "" {
		return nil, errors.New("tasks: DataDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = systemClock{}
	}
	m := &Manager{
		cfg:      cfg,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		state:    stateDir{cfg.DataDir},
		tasks:    make(map[string]*task),
		byName:   make(map[string]*task),
		tokens:   make(map[string]*task),
		defs:     make(map[string]*pborch.TaskDefinition),
		gone:     newUIDSet(4096),
		changed:  make(chan struct{}),
		reportCh: make(chan struct{}, 1),
		session:  cfg.Session,
		runCtx:   context.Background(),
	}
	if err := m.state.init(); err != nil {
		return nil, err
	}
	return m, nil
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Resume takes on the tasks of the local state (those still running are
// re-attached through their runners, those done are reported) and
// removes the containers the drivers, and the namespaces the task network,
// hold for no task it runs. Runners
// run until ctx ends, which detaches them: the tasks keep running, for a
// later Resume to pick up. Call it once, before anything else starts a
// task.
func (m *Manager) Resume(ctx context.Context) {
	m.mu.Lock()
	m.runCtx = ctx
	m.mu.Unlock()
	m.resume()
	m.removeOrphans(ctx)
	m.sweepNetworks(ctx)
}

// Wait waits until every runner has returned (after Resume's ctx ended,
// or the tasks stopped).
func (m *Manager) Wait() { m.runners.Wait() }

// Attach makes a server session the one that starts use, reading the
// definitions they need with read, until ctx ends. detach ends that (and
// ctx's use): it waits for the starts made through it to give up.
func (m *Manager) Attach(ctx context.Context, read DefinitionReader) (detach func()) {
	ctx, cancel := context.WithCancel(ctx)
	l := &link{ctx: ctx, read: read}
	m.mu.Lock()
	m.link = l
	m.broadcastLocked()
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		if m.link == l {
			m.link = nil
			m.broadcastLocked()
		}
		m.mu.Unlock()
		cancel()
		l.starts.Wait()
	}
}

// ReportsWaiting receives a value when there may be reports to write (see
// Reports).
func (m *Manager) ReportsWaiting() <-chan struct{} { return m.reportCh }

// broadcastLocked wakes everything waiting for a change. Called with m.mu
// held.
func (m *Manager) broadcastLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// waitFor waits until cond (called with m.mu held) holds, or ctx ends.
func (m *Manager) waitFor(ctx context.Context, cond func() bool) error {
	for {
		m.mu.Lock()
		ok, ch := cond(), m.changed
		m.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (m *Manager) signalReporter() {
	select {
	case m.reportCh <- struct{}{}:
	default:
	}
}
