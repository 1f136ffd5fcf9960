package exec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// probeCgroups finds out whether containers can have their own cgroup v2
// group under root/parent, and which limits it can carry. It creates the
// parent group and hands it the cpu and memory controllers; anything that
// fails is written into the note rather than returned, because the driver
// still runs, only without (some) limits.
func probeCgroups(root, parent string) cgroups {
	if err := checkCgroupParent(parent); err != nil {
		return cgroups{note: err.Error()}
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(root, &sfs); err != nil {
		return cgroups{note: fmt.Sprintf("cannot inspect %s: %v", root, err)}
	}
	if sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		return cgroups{note: fmt.Sprintf("%s is not a cgroup v2 mount (the host uses cgroup v1 or a hybrid layout)", root)}
	}
	parentDir := filepath.Join(root, parent)
	if err := os.MkdirAll(parentDir, 0o755); err != nil {
		return cgroups{note: fmt.Sprintf("cannot create the parent group: %v", err)}
	}
	if err := unix.Access(parentDir, unix.W_OK); err != nil {
		return cgroups{note: fmt.Sprintf("cannot write to the parent group %s: %v", parentDir, err)}
	}

	rootHas, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return cgroups{note: fmt.Sprintf("cannot read the controllers of %s: %v", root, err)}
	}
	var notes []string
	absent := missingControllers(string(rootHas), limitControllers)
	for _, c := range absent {
		notes = append(notes, fmt.Sprintf("%s: no %s controller in cgroup v2 at %s (cgroup.controllers: %q)", c, c, root, strings.TrimSpace(string(rootHas))))
	}
	// Each group from the root down to the parent must hand the
	// controllers on for the containers' groups to have them.
	levels := []string{root}
	rel, _ := filepath.Rel(root, parentDir)
	dir := root
	for elem := range strings.SplitSeq(rel, string(filepath.Separator)) {
		dir = filepath.Join(dir, elem)
		levels = append(levels, dir)
	}
	failed := map[string]bool{}
	for _, c := range limitControllers {
		if slices.Contains(absent, c) {
			continue
		}
		for _, level := range levels {
			if err := writeCgroupFile(filepath.Join(level, "cgroup.subtree_control"), "+"+c); err != nil {
				notes = append(notes, fmt.Sprintf("%s: cannot enable it in %s: %v", c, level, err))
				failed[c] = true
				break
			}
		}
	}
	handed, err := os.ReadFile(filepath.Join(parentDir, "cgroup.subtree_control"))
	if err != nil {
		return cgroups{note: fmt.Sprintf("cannot read the controllers of %s: %v", parentDir, err)}
	}
	off := missingControllers(string(handed), limitControllers)
	return cgroups{
		parent: parentDir,
		cpu:    !slices.Contains(off, "cpu"),
		memory: !slices.Contains(off, "memory"),
		note:   strings.Join(notes, "; "),
	}
}

// writeCgroupFile writes one value into an existing cgroup interface file.
// No O_CREATE: a missing file is an error, not a new plain file.
func writeCgroupFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// create makes a container's group with its limits and returns its
// directory and an open descriptor for CLONE_INTO_CGROUP. The caller closes
// the descriptor.
func (c cgroups) create(name string, cpuMillis, memoryBytes int64) (string, int, error) {
	dir := filepath.Join(c.parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", -1, fmt.Errorf("cgroup: %w", err)
	}
	type setting struct {
		field, file, value string
		optional           bool // absent on some kernels or hosts
	}
	var settings []setting
	if c.memory {
		if memoryBytes > 0 {
			settings = append(settings,
				setting{"memory", "memory.max", memoryMaxValue(memoryBytes), false},
				// Without swap.max the limit would only push the
				// container into swap.
				setting{"memory", "memory.swap.max", "0", true})
		}
		// The container is one unit: an OOM kill takes all of it, not a
		// random child that the rest then limps on without.
		settings = append(settings, setting{"memory", "memory.oom.group", "1", true})
	}
	if c.cpu && cpuMillis > 0 {
		settings = append(settings, setting{"cpu", "cpu.max", cpuMaxValue(cpuMillis), false})
	}
	for _, s := range settings {
		err := writeCgroupFile(filepath.Join(dir, s.file), s.value)
		if err != nil && !(s.optional && errors.Is(err, fs.ErrNotExist)) {
			_ = unix.Rmdir(dir)
			return "", -1, fmt.Errorf("%s: cannot set %s to %s: %w", s.field, s.file, s.value, err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Rmdir(dir)
		return "", -1, fmt.Errorf("cgroup: %w", err)
	}
	return dir, fd, nil
}

// oomKilled reports whether the kernel killed anything in the group for its
// memory limit.
func oomKilled(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "memory.events"))
	return err == nil && parseOOMKills(string(b)) > 0
}

// killCgroup SIGKILLs every process in the group, those that left the
// container's process group included.
func killCgroup(dir string) error {
	err := writeCgroupFile(filepath.Join(dir, "cgroup.kill"), "1")
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if _, serr := os.Stat(dir); serr != nil {
		return serr
	}
	// Kernels before 5.14 have no cgroup.kill: kill the members one by one.
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return err
	}
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	return nil
}

// removeCgroup removes a container's group, first killing whatever is still
// in it. A group that is already gone is not an error.
func removeCgroup(ctx context.Context, dir string) error {
	const step = 5 * time.Millisecond
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("cgroup: remove %s: %w", dir, err)
		}
		if kerr := killCgroup(dir); kerr != nil && !errors.Is(kerr, fs.ErrNotExist) && !errors.Is(kerr, syscall.ESRCH) {
			return fmt.Errorf("cgroup: kill what is left in %s: %w", dir, kerr)
		}
		// The kernel empties the group asynchronously.
		t := time.NewTimer(step)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("cgroup: remove %s: processes remain: %w", dir, ctx.Err())
		case <-t.C:
		}
	}
}

// RemoveCgroupTree kills every process in the group root/parent and in the
// containers' groups below it, and removes them all: what trellis dev does
// with the parent group of one of its runs (its own at the end, a dead
// run's at the next start). A missing group is not an error.
func RemoveCgroupTree(ctx context.Context, root, parent string) error {
	if err := checkCgroupParent(parent); err != nil {
		return err
	}
	dir := filepath.Join(root, parent)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, removeCgroup(ctx, filepath.Join(dir, e.Name())))
		}
	}
	errs = append(errs, removeCgroup(ctx, dir))
	return errors.Join(errs...)
}
