package exec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// readProcStat reads /proc/<pid>/stat. A pid with no process gives an error
// that matches fs.ErrNotExist.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, procGone(err)
	}
	return parseProcStat(b)
}

// procGone makes an error reading a process's /proc files match
// fs.ErrNotExist when the process is gone: the directory is missing
// (ENOENT), or the process is being reaped and the read fails with ESRCH.
func procGone(err error) error {
	if errors.Is(err, unix.ESRCH) && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	return err
}

// waitPidfd blocks until the process behind pidfd has exited, and closes
// pidfd. A pidfd is readable once its process has exited, whether or not
// the process is our child; that is what lets a restarted agent see a
// container end that it did not start.
//
// The descriptor is handed to Go's network poller (epoll), so a waiting
// container costs a parked goroutine, not an OS thread stuck in poll(2).
// Only if the poller refuses it does this fall back to a blocking poll.
func waitPidfd(pidfd int) error {
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var pollErr error
	exited := func(fd uintptr, timeout int) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, timeout)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				pollErr = fmt.Errorf("poll pidfd: %w", err)
				return true
			}
			return n > 0
		}
	}
	err = rc.Read(func(fd uintptr) bool { return exited(fd, 0) })
	if err != nil {
		// Not pollable here: wait in the kernel instead.
		err = rc.Control(func(fd uintptr) {
			for !exited(fd, -1) {
			}
		})
		if err != nil {
			return err
		}
	}
	return pollErr
}
