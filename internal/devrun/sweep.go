package devrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	execdriver "trellis.dev/trellis/internal/driver/exec"
	"trellis.dev/trellis/internal/tasknet"
)

// Marked removes the containers carrying a label with a value dead says
// yes to (the docker driver's RemoveMarked).
type Marked interface {
	RemoveMarked(ctx context.Context, key string, dead func(value string) bool) (int, error)
}

// Swept is what a sweep removed.
type Swept struct {
	// Runs are the ids of the dead runs whose directory, cgroups and
	// networks were removed.
	Runs []string
	// Networks counts the bridge tasks' networks torn down, Containers the
	// docker containers removed.
	Networks, Containers int
}

// Sweep removes what runs of dev whose process is gone left under tempDir
// (os.TempDir() when empty) and on the docker engine (nil: no docker):
// their bridge tasks' networks, their cgroups (killing what runs in
// them), their directories, and their containers. It goes on past a
// failure, and returns them all.
func Sweep(ctx context.Context, tempDir string, docker Marked, log *slog.Logger) (Swept, error) {
	if tempDir == "" {
		tempDir = os.TempDir()
	}
	var out Swept
	var errs []error
	dirs, _ := filepath.Glob(filepath.Join(tempDir, dirPrefix+"*"))
	for _, dir := range dirs {
		lock, dead := tryLock(dir)
		if !dead {
			continue
		}
		n, err := sweepRun(ctx, dir)
		lock.Close()
		out.Networks += n
		if err != nil {
			errs = append(errs, fmt.Errorf("dev run %s: %w", filepath.Base(dir), err))
			continue
		}
		out.Runs = append(out.Runs, filepath.Base(dir))
	}
	if docker != nil {
		n, err := docker.RemoveMarked(ctx, LabelRun, runGone)
		out.Containers = n
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(out.Runs)+out.Networks+out.Containers > 0 {
		log.Info("removed what earlier runs of trellis dev left behind", "runs", out.Runs, "networks", out.Networks, "containers", out.Containers)
	}
	return out, errors.Join(errs...)
}

// sweepRun removes a dead run, whose lock the caller holds: the networks
// first (their DEL reads the state in the directory), then what its exec
// tasks started (their process groups and cgroups), then the directory.
func sweepRun(ctx context.Context, dir string) (int, error) {
	nets, err := readNetworks(dir)
	if err != nil {
		return 0, err
	}
	torn := 0
	var errs []error
	for agent, c := range nets {
		if c.DataDir == "" {
			continue
		}
		n, err := tasknet.New(c, nil)
		if err == nil {
			var uids []string
			uids, err = n.Sweep(ctx, nil)
			torn += len(uids)
			n.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("agent %s's bridge networks: %w", agent, err))
		}
	}
	if _, err := execdriver.KillGroups(filepath.Join(dir, groupLog)); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, execdriver.RemoveCgroupTree(ctx, execdriver.DefaultCgroupRoot, cgroupParentOf(filepath.Base(dir))))
	if err := errors.Join(errs...); err != nil {
		// The directory keeps what the next sweep needs to try again.
		return torn, err
	}
	return torn, os.RemoveAll(dir)
}

// runGone reports whether the run directory dir (a container's label) is
// no live run's: it is gone, or its lock can be taken.
func runGone(dir string) bool {
	if !validDir(dir) {
		return false
	}
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		return true
	}
	lock, dead := tryLock(dir)
	if dead {
		lock.Close()
	}
	return dead
}
