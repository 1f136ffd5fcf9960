package test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// The exec containers the test starts are real processes, each the leader
// of its own process group. These helpers look at them from outside,
// through /proc, to check that they run on or are gone.

// becomeSubreaper makes the test process the reaper of orphans below it:
// the processes of an agent killed with SIGKILL become its children rather
// than init's, so that once they exit the test can reap them and see them
// gone (a zombie nobody reaps would linger on hosts whose init does not).
func becomeSubreaper(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Logf("cannot become a subreaper (%v): exited orphans are counted gone as zombies", err)
	}
}

// procID names one process for the life of the host: its pid and its
// start time (a pid can be reused; the pair cannot).
type procID struct {
	what  string // "task/container", for messages
	pid   int
	start uint64
}

// procStat is what the helpers read from /proc/<pid>/stat.
type procStat struct {
	state byte // R, S, D, Z, ...
	pgrp  int
	start uint64 // field 22: start time in clock ticks since boot
}

func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	// The command name (field 2) is in parentheses and may hold anything:
	// count the fields from the last ')'.
	end := bytes.LastIndexByte(b, ')')
	if end < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 {
		return procStat{}, false
	}
	pgrp, err1 := strconv.Atoi(string(f[2]))                // field 5
	start, err2 := strconv.ParseUint(string(f[19]), 10, 64) // field 22
	if err1 != nil || err2 != nil || len(f[0]) != 1 {
		return procStat{}, false
	}
	return procStat{state: f[0][0], pgrp: pgrp, start: start}, true
}

// trackPIDs records the processes of a task's exec containers (their
// runtime ids are pids), for the checks and for the cleanup.
func (e *orchEnv) trackPIDs(tk taskJSON) []procID {
	e.t.Helper()
	var out []procID
	for _, c := range tk.Data.Containers {
		pid, err := strconv.Atoi(c.RuntimeID)
		if err != nil || pid <= 0 {
			e.t.Fatalf("container %s: runtime id %q is not a pid", c.Name, c.RuntimeID)
		}
		st, ok := readProcStat(pid)
		if !ok || st.state == 'Z' {
			e.t.Fatalf("container %s: process %d is not running", c.Name, pid)
		}
		if st.pgrp != pid {
			e.t.Errorf("container %s: process %d is in process group %d, not its own", c.Name, pid, st.pgrp)
		}
		p := procID{what: tk.Data.Instance + "/" + c.Name, pid: pid, start: st.start}
		out = append(out, p)
		e.groups = append(e.groups, p)
	}
	return out
}

// alive reports whether p is still the running process it was.
func (p procID) alive() bool {
	st, ok := readProcStat(p.pid)
	return ok && st.state != 'Z' && st.start == p.start
}

func (e *orchEnv) mustAlive(ps []procID, when string) {
	e.t.Helper()
	for _, p := range ps {
		if !p.alive() {
			e.t.Errorf("process %d (%s) does not run %s", p.pid, p.what, when)
		}
	}
}

// waitGone waits until each process and every process of its group has
// exited.
func (e *orchEnv) waitGone(ps []procID, when string) {
	e.t.Helper()
	for _, p := range ps {
		if err := pollUntil(e.t.Context(), waitLimit, func() bool { return !p.alive() && groupGone(p.pid) }); err != nil {
			e.t.Errorf("process %d (%s) or its group still runs %s", p.pid, p.what, when)
		}
	}
}

// killGroup sends SIGKILL to p's process group, unless p's pid now names
// another process: the kernel does not reuse a pid while a group of that
// id has members, so then the group is gone and the id may be another's.
func (p procID) killGroup() {
	if st, ok := readProcStat(p.pid); ok && st.start != p.start {
		return
	}
	_ = unix.Kill(-p.pid, unix.SIGKILL)
}

// groupGone reaps the group's exited processes that were left to the test,
// and reports whether any process of the group still runs.
func groupGone(pgid int) bool {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-pgid, &ws, unix.WNOHANG, nil)
		if err != nil || pid <= 0 {
			break
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok && st.pgrp == pgid && st.state != 'Z' {
			return false
		}
	}
	return true
}
