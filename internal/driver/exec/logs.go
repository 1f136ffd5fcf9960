package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"trellis.dev/trellis/internal/driver"
)

// Logs reads one stream of a container: the rotated files oldest first,
// then the current one. With follow it then tails the current file until
// ctx ends (the reader then returns io.EOF) or the reader is closed. A
// rotation while it reads is caught: the reader goes on in the rotated copy
// from where it was, then in the truncated file from its start, so nothing
// is read twice or skipped, unless the reader falls so far behind that the
// rotator drops a file before it is read. The handle is not needed: the
// files are named by spec.LogDir and spec.Container.
func (d *Driver) Logs(ctx context.Context, h driver.Handle, spec driver.Spec, stream driver.Stream, follow bool) (io.ReadCloser, error) {
	if stream != driver.Stdout && stream != driver.Stderr {
		return nil, fmt.Errorf("stream: %q is neither %q nor %q", stream, driver.Stdout, driver.Stderr)
	}
	if err := checkContainerName(spec.Container); err != nil {
		return nil, err
	}
	if spec.LogDir == "" {
		return nil, errors.New("log_dir: empty")
	}
	path := logPath(spec.LogDir, spec.Container, stream)
	return openLogReader(ctx, path, d.cfg.LogMaxFiles-1, d.logFile(path), follow, d.cfg.LogFollowInterval)
}

// logReader reads a log file and its rotated copies as one stream.
type logReader struct {
	path     string
	keep     int
	file     *logFile // the rotator's lock and count for path
	follow   bool
	interval time.Duration
	ctx      context.Context
	cancel   context.CancelFunc

	mu     sync.Mutex // Read against Close
	closed bool
	// queue holds rotated files still to read before cur, oldest first,
	// each positioned where reading starts.
	queue []*os.File
	cur   *os.File
	off   int64 // how far cur has been read
	// rotations is file.rotations when the reader last looked.
	rotations uint64
}

func openLogReader(ctx context.Context, path string, keep int, file *logFile, follow bool, interval time.Duration) (*logReader, error) {
	file.mu.RLock()
	defer file.mu.RUnlock()
	r := &logReader{path: path, keep: keep, file: file, follow: follow, interval: interval, rotations: file.rotations}
	for i := keep; i >= 1; i-- {
		f, err := os.Open(rotatedPath(path, i))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			r.closeFiles()
			return nil, fmt.Errorf("logs: %w", err)
		}
		r.queue = append(r.queue, f)
	}
	cur, err := os.Open(path)
	if err != nil {
		r.closeFiles()
		return nil, fmt.Errorf("logs: %w", err)
	}
	r.cur = cur
	r.ctx, r.cancel = context.WithCancel(ctx)
	return r, nil
}

func (r *logReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, err := r.readSome(p)
		if n > 0 || err != nil {
			return n, err
		}
		if !r.follow {
			return 0, io.EOF
		}
		t := time.NewTimer(r.interval)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return 0, io.EOF
		case <-t.C:
		}
	}
}

// readSome reads what there is now; 0, nil when it has all been read.
func (r *logReader) readSome(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, os.ErrClosed
	}
	// Under the rotator's lock, a file is never seen between its copy and
	// its truncate.
	r.file.mu.RLock()
	defer r.file.mu.RUnlock()
	r.catchRotation()
	for len(r.queue) > 0 {
		n, err := r.queue[0].Read(p)
		if n > 0 {
			return n, nil
		}
		if err != nil && err != io.EOF {
			return 0, fmt.Errorf("logs: %w", err)
		}
		r.queue[0].Close()
		r.queue = r.queue[1:]
	}
	n, err := r.cur.ReadAt(p, r.off)
	r.off += int64(n)
	if n > 0 {
		return n, nil
	}
	if err != nil && err != io.EOF {
		return 0, fmt.Errorf("logs: %w", err)
	}
	return 0, nil
}

// catchRotation queues the files rotated since the reader last looked: the
// oldest from where the reader was in the current file, any later ones
// whole. The current file is then read from its start.
func (r *logReader) catchRotation() {
	since := r.file.rotations - r.rotations
	r.rotations = r.file.rotations
	if since == 0 {
		// Truncated by someone else: start again from the top.
		if fi, err := r.cur.Stat(); err == nil && fi.Size() < r.off {
			r.off = 0
		}
		return
	}
	n, continues := catchUp(since, r.keep)
	for i := n; i >= 1; i-- {
		f, err := os.Open(rotatedPath(r.path, i))
		if err != nil {
			continue
		}
		if i == n && continues {
			if _, err := f.Seek(r.off, io.SeekStart); err != nil {
				f.Close()
				continue
			}
		}
		r.queue = append(r.queue, f)
	}
	r.off = 0
}

// catchUp says, for a reader that missed since rotations of a file that
// keeps keep rotated copies, how many of the copies to read (n: .n down to
// .1) and whether the oldest of them is the one that holds what the reader
// was reading, so that it goes on from its offset. If more rotations
// happened than copies are kept, that file is gone and all kept copies are
// read whole.
func catchUp(since uint64, keep int) (n int, continues bool) {
	if since <= uint64(keep) {
		return int(since), true
	}
	return keep, false
}

// Close ends the reader; a Read blocked in follow returns io.EOF.
func (r *logReader) Close() error {
	r.cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.closeFiles()
	return nil
}

func (r *logReader) closeFiles() {
	for _, f := range r.queue {
		f.Close()
	}
	r.queue = nil
	if r.cur != nil {
		r.cur.Close()
	}
}
