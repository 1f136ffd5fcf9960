//go:build !linux

package exec

import (
	"context"
	"fmt"
	"runtime"
	"syscall"

	"trellis.dev/trellis/internal/driver"
)

// Off Linux the driver compiles, so that the agent does, but reports itself
// unavailable: it needs /proc, pidfds and cgroup v2.

func unavailable() error {
	return fmt.Errorf("exec driver needs Linux, this is %s: %w", runtime.GOOS, driver.ErrUnavailable)
}

func (d *Driver) Fingerprint(ctx context.Context) driver.Fingerprint {
	return driver.Fingerprint{Detail: unavailable().Error()}
}

func (d *Driver) Start(ctx context.Context, spec driver.Spec) (driver.Handle, error) {
	return driver.Handle{}, unavailable()
}

func (d *Driver) Wait(ctx context.Context, h driver.Handle) (driver.Exit, error) {
	return driver.Exit{Code: -1, Err: unavailable()}, unavailable()
}

func (d *Driver) Signal(ctx context.Context, h driver.Handle, sig syscall.Signal) error {
	return unavailable()
}

func (d *Driver) Exec(ctx context.Context, h driver.Handle, cmd []string) (int, []byte, error) {
	return -1, nil, unavailable()
}

func (d *Driver) Recover(ctx context.Context, h driver.Handle) error { return unavailable() }

func (d *Driver) Destroy(ctx context.Context, h driver.Handle) error { return unavailable() }

// forker has nothing to fork off Linux.
type forker struct{}

// RemoveCgroupTree has no cgroups to remove off Linux.
func RemoveCgroupTree(ctx context.Context, root, parent string) error { return nil }

// KillAll has nothing to kill off Linux.
func (d *Driver) KillAll(ctx context.Context) error { return nil }

// KillGroups has no groups to kill off Linux.
func KillGroups(path string) (int, error) { return 0, nil }
