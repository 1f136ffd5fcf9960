package exec

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"
)

// Log rotation is copy-truncate: the child holds its log files open with
// O_APPEND and the agent never sits in its output path, so the process
// outlives the agent. To rotate, the rotator copies the full file aside and
// truncates it in place; the child's next write lands at offset 0 of the
// same file. What the child writes between the rotator's last read and the
// truncate is lost; the rotator shrinks that window by copying the tail
// again just before truncating, but cannot close it. Rotated files are
// <name>.1 (newest) to <name>.<LogMaxFiles-1> (oldest).

// logFile is the driver's record of one log file.
type logFile struct {
	mu        sync.RWMutex // the rotator writes, readers read
	rotations uint64       // how many times the file has been rotated
}

func rotatedPath(path string, i int) string { return fmt.Sprintf("%s.%d", path, i) }

// rotateFile rotates path once it has reached maxBytes, keeping keep older
// files, and reports whether it did. With keep 0 it only truncates.
func rotateFile(path string, maxBytes int64, keep int) (bool, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if fi.Size() < maxBytes {
		return false, nil
	}
	if keep <= 0 {
		return true, os.Truncate(path, 0)
	}

	src, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer src.Close()
	tmp := path + ".rotating"
	dst, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return false, err
	}
	// The bulk copy comes first, so that a failure leaves the rotated
	// files as they were.
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		os.Remove(tmp)
		return false, fmt.Errorf("copy %s: %w", path, err)
	}
	if err := shiftRotated(path, keep); err != nil {
		dst.Close()
		os.Remove(tmp)
		return false, err
	}
	// What the child wrote during the copy and the shift. From here on a
	// failure still truncates: a full disk is better served by a shorter
	// log than by a growing one.
	_, tailErr := io.Copy(dst, src)
	closeErr := dst.Close()
	renameErr := os.Rename(tmp, rotatedPath(path, 1))
	truncErr := os.Truncate(path, 0)
	return true, errors.Join(tailErr, closeErr, renameErr, truncErr)
}

// shiftRotated makes room for a new <path>.1: the oldest kept file goes,
// each other moves one up.
func shiftRotated(path string, keep int) error {
	if err := os.Remove(rotatedPath(path, keep)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for i := keep - 1; i >= 1; i-- {
		if err := os.Rename(rotatedPath(path, i), rotatedPath(path, i+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// rotateLoop looks after a container's log files until its process has
// exited, then rotates once more and ends. A restarted agent starts it
// again from Recover.
func (d *Driver) rotateLoop(c *container) {
	paths := []string{c.st.Stdout, c.st.Stderr}
	failing := map[string]string{}
	t := time.NewTicker(d.cfg.LogRotateInterval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			d.rotateLogs(paths, failing)
			return
		case <-t.C:
			d.rotateLogs(paths, failing)
		}
	}
}

// rotateLogs rotates each path that is due. failing remembers the last
// error per path, so that a lasting fault is logged once, not every tick.
func (d *Driver) rotateLogs(paths []string, failing map[string]string) {
	for _, p := range paths {
		if p == "" {
			continue
		}
		// The cheap check first: most ticks rotate nothing and need not
		// hold up readers.
		if fi, err := os.Stat(p); err == nil && fi.Size() < d.cfg.LogMaxBytes {
			continue
		}
		l := d.logFile(p)
		l.mu.Lock()
		did, err := rotateFile(p, d.cfg.LogMaxBytes, d.cfg.LogMaxFiles-1)
		if did {
			l.rotations++
		}
		l.mu.Unlock()
		switch {
		case err != nil && failing[p] != err.Error():
			failing[p] = err.Error()
			d.log.Warn("log rotation failed", "file", p, "err", err)
		case err == nil && failing[p] != "":
			delete(failing, p)
			d.log.Info("log rotation works again", "file", p)
		}
	}
}
