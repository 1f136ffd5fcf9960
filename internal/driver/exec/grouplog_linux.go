package exec

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The group log: what a dead agent's containers left.
//
// A parent-death signal (DieWithAgent) kills a container's process, not
// what it started: a shell's background job lives on in the container's
// process group, no child of the agent. Where a cgroup holds the
// container, killing the group's cgroup ends them; elsewhere the group
// log does: one line per container, "<pid> <start ticks>", appended before
// Start returns, read by KillGroups once the agent is gone.

// logGroup appends a container's process group to Config.GroupLog.
func (d *Driver) logGroup(pid int, startTicks uint64) error {
	if d.cfg.GroupLog == "" {
		return nil
	}
	f, err := os.OpenFile(d.cfg.GroupLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("group log: %w", err)
	}
	_, err = fmt.Fprintf(f, "%d %d\n", pid, startTicks)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("group log: %w", err)
	}
	return nil
}

// KillGroups sends SIGKILL to every process group a group log names, for
// an agent that is gone: a group is killed unless its leader's pid now
// names another process (the kernel reuses a pid only once no group of
// that id has members, so then ours is empty). A missing log is nothing
// to kill. It returns how many groups still had processes.
func KillGroups(path string) (int, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	killed := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pidText, ticksText, ok := strings.Cut(sc.Text(), " ")
		pid, err1 := strconv.Atoi(pidText)
		ticks, err2 := strconv.ParseUint(ticksText, 10, 64)
		if !ok || err1 != nil || err2 != nil || pid <= 1 {
			continue // a torn last line
		}
		if ps, err := readProcStat(pid); err == nil && ps.StartTicks != ticks {
			continue
		}
		if unix.Kill(-pid, unix.SIGKILL) == nil {
			killed++
		}
	}
	return killed, sc.Err()
}
