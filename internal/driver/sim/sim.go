// Package sim is the simulated task driver of `trellis sim`: containers
// that "run" without processes, so that one process can stand in for
// thousands of instances against real servers. A container starts at once
// or after a configured delay, fails to start or exits with a configured
// probability, and otherwise runs until it is signalled.
//
// It is a real implementation of the driver contract, held to the same
// rules as exec and docker (the agent cannot tell it apart), not a test
// double: what it simulates is the machine, not the driver.
package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"time"

	"trellis.dev/trellis/internal/driver"
)

// Name is the driver's name. A sim agent advertises it as both exec and
// docker, so that any task definition can be placed on it.
const Name = "sim"

// Config says how simulated containers behave.
type Config struct {
	// StartDelay is how long a start takes.
	StartDelay time.Duration
	// StartFailureRate is the probability (0 to 1) that a start fails.
	StartFailureRate float64
	// ExitRate is the probability that a started container exits by
	// itself, with code 1, after ExitAfter.
	ExitRate  float64
	ExitAfter time.Duration
	// Seed makes the random choices repeatable.
	Seed uint64
}

// Driver runs simulated containers.
type Driver struct {
	cfg Config
	mu  sync.Mutex
	rnd *rand.Rand
	n   uint64
	// running holds live containers by id.
	running map[string]*container
}

type container struct {
	done chan struct{}
	exit driver.Exit
	once sync.Once
	log  bytes.Buffer
}

func (c *container) finish(e driver.Exit) {
	c.once.Do(func() {
		c.exit = e
		close(c.done)
	})
}

// New returns a simulated driver.
func New(cfg Config) *Driver {
	return &Driver{cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), running: make(map[string]*container)}
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// Fingerprint implements driver.Driver: always available.
func (d *Driver) Fingerprint(context.Context) driver.Fingerprint {
	return driver.Fingerprint{Available: true, Detail: "simulated"}
}

func (d *Driver) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rnd.Float64() < p
}

// Start implements driver.Driver.
func (d *Driver) Start(ctx context.Context, spec driver.Spec) (driver.Handle, error) {
	if d.cfg.StartDelay > 0 {
		t := time.NewTimer(d.cfg.StartDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return driver.Handle{}, ctx.Err()
		}
	}
	if d.chance(d.cfg.StartFailureRate) {
		return driver.Handle{}, fmt.Errorf("simulated start failure of %s", spec.Container)
	}
	c := &container{done: make(chan struct{})}
	fmt.Fprintf(&c.log, "simulated container %s of task %s started\n", spec.Container, spec.TaskID)
	d.mu.Lock()
	d.n++
	id := strconv.FormatUint(d.n, 10)
	d.running[id] = c
	d.mu.Unlock()
	if d.chance(d.cfg.ExitRate) {
		time.AfterFunc(d.cfg.ExitAfter, func() { c.finish(driver.Exit{Code: 1}) })
	}
	return driver.Handle{Driver: Name, ID: id, StartedAt: time.Now()}, nil
}

func (d *Driver) get(h driver.Handle) (*container, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.running[h.ID]
	if !ok {
		return nil, fmt.Errorf("simulated container %s: %w", h.ID, driver.ErrGone)
	}
	return c, nil
}

// Wait implements driver.Driver.
func (d *Driver) Wait(ctx context.Context, h driver.Handle) (driver.Exit, error) {
	c, err := d.get(h)
	if err != nil {
		return driver.Exit{}, err
	}
	select {
	case <-c.done:
		return c.exit, nil
	case <-ctx.Done():
		return driver.Exit{}, ctx.Err()
	}
}

// Signal implements driver.Driver: any terminating signal ends the
// container at once, with 128+signal as a shell would report it.
func (d *Driver) Signal(_ context.Context, h driver.Handle, sig syscall.Signal) error {
	c, err := d.get(h)
	if err != nil {
		if errors.Is(err, driver.ErrGone) {
			return nil
		}
		return err
	}
	c.finish(driver.Exit{Code: 128 + int(sig), Signal: sig})
	return nil
}

// Exec implements driver.Driver: every command succeeds.
func (d *Driver) Exec(_ context.Context, h driver.Handle, _ []string) (int, []byte, error) {
	if _, err := d.get(h); err != nil {
		return -1, nil, err
	}
	return 0, nil, nil
}

// Recover implements driver.Driver: simulated containers live only as long
// as the process, so any handle from a previous process is gone.
func (d *Driver) Recover(_ context.Context, h driver.Handle) error {
	_, err := d.get(h)
	return err
}

// Destroy implements driver.Driver.
func (d *Driver) Destroy(_ context.Context, h driver.Handle) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.running, h.ID)
	return nil
}

// Logs implements driver.Driver: one line saying the container started.
func (d *Driver) Logs(_ context.Context, h driver.Handle, _ driver.Spec, stream driver.Stream, _ bool) (io.ReadCloser, error) {
	c, err := d.get(h)
	if err != nil {
		return nil, err
	}
	if stream != driver.Stdout {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return io.NopCloser(bytes.NewReader(bytes.Clone(c.log.Bytes()))), nil
}

// Running is how many simulated containers are live.
func (d *Driver) Running() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.running)
}
