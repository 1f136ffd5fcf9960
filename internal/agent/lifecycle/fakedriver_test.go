package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"syscall"
	"time"

	"trellis.dev/trellis/internal/driver"
)

// fakeDriver is a driver whose containers are goroutines running a script
// the test chooses. It is the lifecycle's test partner, not the thing under
// test: it records what it was asked, with the (bubble's) time, so that
// tests can assert a task's timeline.
type fakeDriver struct {
	t0 time.Time

	mu       sync.Mutex
	scripts  map[string]script // by container name; default: untilSignal(0)
	startErr map[string]error
	// healthyAfter: a command check of the container passes once it has
	// run this long.
	healthyAfter map[string]time.Duration
	procs        map[string]*fakeProc // by handle id
	starts       map[string]int       // by container name
	log          []entry
}

type entry struct {
	at   time.Duration
	what string
}

func (e entry) String() string { return fmt.Sprintf("%s %s", e.at, e.what) }

// script is what a container does: it returns its exit.
type script func(p *fakeProc) driver.Exit

type fakeProc struct {
	name    string
	id      string
	started time.Time
	sigs    chan syscall.Signal
	done    chan struct{}
	exit    driver.Exit
}

func newFakeDriver() *fakeDriver {
	return &fakeDriver{
		t0:           time.Now(),
		scripts:      map[string]script{},
		startErr:     map[string]error{},
		healthyAfter: map[string]time.Duration{},
		procs:        map[string]*fakeProc{},
		starts:       map[string]int{},
	}
}

// Scripts.

// untilSignal exits with code on SIGTERM, killed on SIGKILL.
func untilSignal(code int) script {
	return func(p *fakeProc) driver.Exit {
		for sig := range p.sigs {
			if sig == syscall.SIGKILL {
				return driver.Exit{Code: -1, Signal: syscall.SIGKILL}
			}
			if sig == syscall.SIGTERM {
				return driver.Exit{Code: code}
			}
		}
		return driver.Exit{}
	}
}

// drainFor exits with 0 d after SIGTERM (a graceful shutdown that takes d).
func drainFor(d time.Duration) script {
	return func(p *fakeProc) driver.Exit {
		for sig := range p.sigs {
			if sig == syscall.SIGKILL {
				return driver.Exit{Code: -1, Signal: syscall.SIGKILL}
			}
			if sig == syscall.SIGTERM {
				select {
				case <-time.After(d):
					return driver.Exit{Code: 0}
				case <-p.sigs: // only SIGKILL comes after SIGTERM
					return driver.Exit{Code: -1, Signal: syscall.SIGKILL}
				}
			}
		}
		return driver.Exit{}
	}
}

// ignoreTerm runs until SIGKILL.
func ignoreTerm() script {
	return func(p *fakeProc) driver.Exit {
		for sig := range p.sigs {
			if sig == syscall.SIGKILL {
				return driver.Exit{Code: -1, Signal: syscall.SIGKILL}
			}
		}
		return driver.Exit{}
	}
}

// exitAfter exits with code after d, or as untilSignal on a signal.
func exitAfter(d time.Duration, code int) script {
	return func(p *fakeProc) driver.Exit {
		select {
		case <-time.After(d):
			return driver.Exit{Code: code}
		case sig := <-p.sigs:
			if sig == syscall.SIGKILL {
				return driver.Exit{Code: -1, Signal: syscall.SIGKILL}
			}
			return driver.Exit{Code: 143}
		}
	}
}

func (d *fakeDriver) record(format string, args ...any) {
	d.log = append(d.log, entry{at: time.Since(d.t0), what: fmt.Sprintf(format, args...)})
}

// timeline returns the log ordered by time, then text (what happens at one
// instant happens in no particular order).
func (d *fakeDriver) timeline() []string {
	d.mu.Lock()
	log := slices.Clone(d.log)
	d.mu.Unlock()
	slices.SortStableFunc(log, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.what, b.what))
	})
	var out []string
	for _, e := range log {
		out = append(out, e.String())
	}
	return out
}

func (d *fakeDriver) Name() string { return "fake" }

func (d *fakeDriver) Fingerprint(context.Context) driver.Fingerprint {
	return driver.Fingerprint{Available: true, Detail: "fake"}
}

func (d *fakeDriver) Start(ctx context.Context, spec driver.Spec) (driver.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.startErr[spec.Container]; err != nil {
		d.record("start %s failed", spec.Container)
		return driver.Handle{}, err
	}
	if spec.TaskID == "" || spec.TaskUID == "" {
		return driver.Handle{}, errors.New("spec without a task id")
	}
	d.starts[spec.Container]++
	p := &fakeProc{
		name:    spec.Container,
		id:      fmt.Sprintf("%s#%d", spec.Container, d.starts[spec.Container]),
		started: time.Now(),
		sigs:    make(chan syscall.Signal, 8),
		done:    make(chan struct{}),
	}
	d.procs[p.id] = p
	run := d.scripts[spec.Container]
	if run == nil {
		run = untilSignal(0)
	}
	d.record("start %s", p.id)
	go func() {
		exit := run(p)
		d.mu.Lock()
		p.exit = exit
		d.record("exit %s %d", p.id, exit.Code)
		d.mu.Unlock()
		close(p.done)
	}()
	return driver.Handle{Driver: "fake", ID: p.id, StartedAt: p.started}, nil
}

func (d *fakeDriver) proc(h driver.Handle) (*fakeProc, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.procs[h.ID]
	if !ok {
		return nil, fmt.Errorf("%s: %w", h.ID, driver.ErrGone)
	}
	return p, nil
}

func (d *fakeDriver) Wait(ctx context.Context, h driver.Handle) (driver.Exit, error) {
	p, err := d.proc(h)
	if err != nil {
		return driver.Exit{}, err
	}
	select {
	case <-p.done:
		d.mu.Lock()
		defer d.mu.Unlock()
		return p.exit, nil
	case <-ctx.Done():
		return driver.Exit{}, ctx.Err()
	}
}

func (d *fakeDriver) Signal(ctx context.Context, h driver.Handle, sig syscall.Signal) error {
	p, err := d.proc(h)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.record("signal %s %s", h.ID, map[syscall.Signal]string{syscall.SIGTERM: "TERM", syscall.SIGKILL: "KILL"}[sig])
	d.mu.Unlock()
	select {
	case <-p.done:
	case p.sigs <- sig:
	}
	return nil
}

func (d *fakeDriver) Exec(ctx context.Context, h driver.Handle, cmd []string) (int, []byte, error) {
	p, err := d.proc(h)
	if err != nil {
		return -1, nil, err
	}
	d.mu.Lock()
	after, ok := d.healthyAfter[p.name]
	d.mu.Unlock()
	if ok && time.Since(p.started) >= after {
		return 0, []byte("ok"), nil
	}
	return 1, []byte("not yet"), nil
}

func (d *fakeDriver) Recover(ctx context.Context, h driver.Handle) error {
	p, err := d.proc(h)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
		return fmt.Errorf("%s: %w", h.ID, driver.ErrGone)
	default:
		d.mu.Lock()
		d.record("recover %s", h.ID)
		d.mu.Unlock()
		return nil
	}
}

func (d *fakeDriver) Destroy(ctx context.Context, h driver.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record("destroy %s", h.ID)
	return nil
}

func (d *fakeDriver) Logs(context.Context, driver.Handle, driver.Spec, driver.Stream, bool) (io.ReadCloser, error) {
	return nil, errors.New("the fake driver keeps no logs")
}

// forget makes a container vanish, as one that exited while the agent was
// away.
func (d *fakeDriver) forget(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p, ok := d.procs[id]; ok {
		select {
		case p.sigs <- syscall.SIGKILL:
		default:
		}
	}
	delete(d.procs, id)
}
