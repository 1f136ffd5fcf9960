package devrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"trellis.dev/trellis/internal/atomicfile"
	execdriver "trellis.dev/trellis/internal/driver/exec"
	"trellis.dev/trellis/internal/tasknet"
)

// LabelRun is the docker label of a run's containers; its value is the
// run's directory (an absolute path: devs of other users or TMPDIRs share
// the engine, and a sweep looks for the run's lock there).
const LabelRun = "trellis.dev_run"

const (
	// dirPrefix begins every run's directory name (and so its id).
	dirPrefix = "trellis-dev-"
	lockFile  = "run.lock"
	// networkFile records the agents' network configurations.
	networkFile = "network.json"
	// groupLog lists the exec containers' process groups (exec.KillGroups).
	groupLog = "exec-groups"
	// cgroupParent is the group under which each run's exec tasks have
	// their run's group.
	cgroupParent = "trellis"
)

// Run is a running dev's hold on the host.
type Run struct {
	dir  string
	lock *os.File

	mu       sync.Mutex
	networks map[string]tasknet.Config // by agent name
}

// Start makes a run under tempDir (os.TempDir() when empty) and locks it
// for the life of this process.
func Start(tempDir string) (*Run, error) {
	if tempDir == "" {
		tempDir = os.TempDir()
	}
	dir, err := os.MkdirTemp(tempDir, dirPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("dev run directory: %w", err)
	}
	// Locked before it has its name: see the package's design decisions.
	f, err := os.OpenFile(filepath.Join(dir, lockFile+".new"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			err = os.Rename(f.Name(), filepath.Join(dir, lockFile))
		}
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("dev run lock: %w", err)
	}
	return &Run{dir: dir, lock: f, networks: map[string]tasknet.Config{}}, nil
}

// ID is the run's id: its directory's name, the value of LabelRun.
func (r *Run) ID() string { return filepath.Base(r.dir) }

// Dir is the run's directory, where its agents keep their data.
func (r *Run) Dir() string { return r.dir }

// CgroupParent is the cgroup (below the cgroup root) of the run's exec
// tasks' groups.
func (r *Run) CgroupParent() string { return cgroupParentOf(r.ID()) }

func cgroupParentOf(id string) string { return cgroupParent + "/" + id }

// GroupLog is the file where the run's exec drivers log their containers'
// process groups (exec.Config.GroupLog).
func (r *Run) GroupLog() string { return filepath.Join(r.dir, groupLog) }

// Labels are the docker labels of the run's containers.
func (r *Run) Labels() map[string]string { return map[string]string{LabelRun: r.dir} }

// RecordNetwork notes an agent's network configuration, for the sweep
// should this run die with bridge tasks.
func (r *Run) RecordNetwork(agent string, c tasknet.Config) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.networks[agent] = c
	b, err := json.Marshal(r.networks)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(r.dir, networkFile), b)
}

// Close removes the run: what its exec tasks started and left running, its
// cgroups and its directory, then drops the lock. The agents have stopped
// by then.
func (r *Run) Close(ctx context.Context) error {
	_, err := execdriver.KillGroups(r.GroupLog())
	errs := []error{err, execdriver.RemoveCgroupTree(ctx, execdriver.DefaultCgroupRoot, r.CgroupParent())}
	errs = append(errs, os.RemoveAll(r.dir))
	errs = append(errs, r.lock.Close())
	return errors.Join(errs...)
}

// validDir: a run directory as found in a label is trusted only when it
// is a clean absolute path whose last element names a run.
func validDir(dir string) bool {
	return filepath.IsAbs(dir) && filepath.Clean(dir) == dir && strings.HasPrefix(filepath.Base(dir), dirPrefix)
}

// tryLock takes the lock of the run in dir: held, the run's dev is gone.
// ok false: the run is alive, or has no lock (an older dev, or one still
// starting).
func tryLock(dir string) (f *os.File, ok bool) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR, 0)
	if err != nil {
		return nil, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return f, true
}

// readNetworks reads a run's network.json; a run without bridge networks
// has none.
func readNetworks(dir string) (map[string]tasknet.Config, error) {
	b, err := os.ReadFile(filepath.Join(dir, networkFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var m map[string]tasknet.Config
	return m, json.Unmarshal(b, &m)
}
