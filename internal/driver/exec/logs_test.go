//go:build linux

package exec_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/driver/exec"
)

// burster is a container that writes prepared bursts of output to stdout,
// one burst each time the test says go. Each burst is one write(2) (cat of
// a small file), so the rotator never sees half of one and every step of
// these tests is determined by the test, not by timing.
type burster struct {
	spec   driver.Spec
	bursts [][]byte
	fifo   *os.File
}

const burstLines = 150 // about 1.5 KB a burst, more than the 1 KiB limit

func newBurster(t *testing.T, n int) *burster {
	t.Helper()
	b := &burster{}
	var script strings.Builder
	script.WriteString("for f in")
	b.spec = testSpec(t, "sh", "-c", "")
	for i := range n {
		var buf bytes.Buffer
		for j := range burstLines {
			fmt.Fprintf(&buf, "burst %d line %d\n", i, j)
		}
		b.bursts = append(b.bursts, buf.Bytes())
		name := fmt.Sprintf("burst%d", i)
		if err := os.WriteFile(filepath.Join(b.spec.TaskDir, name), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		script.WriteString(" " + name)
	}
	script.WriteString(`; do read go < go; cat "$f"; done`)
	b.spec.Command = []string{"sh", "-c", script.String()}
	fifo := filepath.Join(b.spec.TaskDir, "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Opened read-write, the fifo neither blocks here nor ever reports
	// end of file to the script.
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	b.fifo = f
	return b
}

func (b *burster) next(t *testing.T) {
	t.Helper()
	if _, err := b.fifo.WriteString("go\n"); err != nil {
		t.Fatal(err)
	}
}

func (b *burster) stdout(i int) string {
	p := filepath.Join(b.spec.LogDir, "app.stdout")
	if i > 0 {
		p = fmt.Sprintf("%s.%d", p, i)
	}
	return p
}

// waitRotated waits until burst i has been rotated out of the current file.
func (b *burster) waitRotated(t *testing.T, i int) {
	t.Helper()
	eventually(t, fmt.Sprintf("burst %d rotated", i), func() bool {
		cur, err := os.Stat(b.stdout(0))
		if err != nil || cur.Size() != 0 {
			return false
		}
		rotated, err := os.ReadFile(b.stdout(1))
		return err == nil && bytes.Equal(rotated, b.bursts[i])
	})
}

func (b *burster) joined(from, to int) string {
	return string(bytes.Join(b.bursts[from:to], nil))
}

// rotatingConfig rotates at 1 KiB and looks often.
func rotatingConfig(maxFiles int) exec.Config {
	return exec.Config{
		LogMaxBytes:       1024,
		LogMaxFiles:       maxFiles,
		LogRotateInterval: time.Millisecond,
		LogFollowInterval: time.Millisecond,
	}
}

func rotatingDriver(t *testing.T, maxFiles int) *exec.Driver {
	return newDriver(t, rotatingConfig(maxFiles))
}

func TestLogRotation(t *testing.T) {
	d := rotatingDriver(t, 3)
	b := newBurster(t, 6)
	h := start(t, d, b.spec)
	for i := range b.bursts {
		b.next(t)
		b.waitRotated(t, i)
		// Files are shifted: the burst before is now .2.
		if i > 0 {
			got, err := os.ReadFile(b.stdout(2))
			if err != nil || !bytes.Equal(got, b.bursts[i-1]) {
				t.Fatalf("after burst %d, .2 holds %d bytes (%v), want burst %d", i, len(got), err, i-1)
			}
		}
	}
	if exit := wait(t, d, h); exit.Code != 0 {
		t.Fatalf("exit = %+v", exit)
	}
	// Three files kept, the current one included.
	if _, err := os.Stat(b.stdout(3)); !os.IsNotExist(err) {
		t.Errorf("%s exists (%v), want only 2 rotated files", b.stdout(3), err)
	}
	if got, want := readLogs(t, d, h, b.spec, driver.Stdout), b.joined(4, 6); got != want {
		t.Errorf("Logs read %d bytes, want the last two bursts (%d bytes), oldest first", len(got), len(want))
	}
}

func TestLogRotationKeepingOneFile(t *testing.T) {
	d := rotatingDriver(t, 1)
	b := newBurster(t, 2)
	h := start(t, d, b.spec)
	for range b.bursts {
		b.next(t)
		eventually(t, "the log truncated", func() bool {
			fi, err := os.Stat(b.stdout(0))
			return err == nil && fi.Size() == 0
		})
	}
	wait(t, d, h)
	if _, err := os.Stat(b.stdout(1)); !os.IsNotExist(err) {
		t.Errorf("%s exists (%v), want no rotated file", b.stdout(1), err)
	}
}

// A follower started before the first output reads every burst exactly
// once, across rotations, and stops when its context ends.
func TestLogsFollowAcrossRotation(t *testing.T) {
	d := rotatingDriver(t, 3)
	b := newBurster(t, 6)
	h := start(t, d, b.spec)

	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	r, err := d.Logs(ctx, h, b.spec, driver.Stdout, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := &syncBuffer{}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(got, r)
		copied <- err
	}()

	for i := range b.bursts {
		b.next(t)
		// Every other burst, let the follower catch up first, so that it
		// meets rotations both mid-file and at its end. (Which side of the
		// rotation each read falls on is pinned down in logreader_test.go.)
		if i%2 == 0 {
			eventually(t, fmt.Sprintf("the follower to read burst %d", i), func() bool {
				return got.Len() == len(b.joined(0, i+1))
			})
		}
		b.waitRotated(t, i)
	}
	want := b.joined(0, len(b.bursts))
	eventually(t, "the follower to read everything", func() bool { return got.Len() >= len(want) })
	cancel()
	select {
	case err := <-copied:
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("the follower did not stop when its context ended")
	}
	if got.String() != want {
		t.Errorf("the follower read %d bytes, want %d: every burst once, in order; it read:\n%s", got.Len(), len(want), summarize(got.String()))
	}
	wait(t, d, h)
}

// summarize shows a burster's output as runs of lines, to make a failure
// readable: "burst 0 line 0-149, burst 1 line 0-20, burst 0 line 21-..."
func summarize(s string) string {
	var out []string
	var run string
	var first, last int
	flush := func() {
		if run != "" {
			out = append(out, fmt.Sprintf("%s line %d-%d", run, first, last))
		}
	}
	for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		var b, n int
		if _, err := fmt.Sscanf(l, "burst %d line %d", &b, &n); err != nil {
			flush()
			out = append(out, fmt.Sprintf("%q", l))
			run = ""
			continue
		}
		name := fmt.Sprintf("burst %d", b)
		if name == run && n == last+1 {
			last = n
			continue
		}
		flush()
		run, first, last = name, n, n
	}
	flush()
	return strings.Join(out, "\n")
}

// A follower started late reads what is kept (rotated files oldest first,
// then the current file) and then what comes.
func TestLogsFollowStartedLate(t *testing.T) {
	d := rotatingDriver(t, 3)
	b := newBurster(t, 5)
	h := start(t, d, b.spec)
	for i := range 3 {
		b.next(t)
		b.waitRotated(t, i)
	}
	r, err := d.Logs(ctxFor(t), h, b.spec, driver.Stdout, true)
	if err != nil {
		t.Fatal(err)
	}
	got := &syncBuffer{}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(got, r)
		copied <- err
	}()
	b.next(t)
	b.waitRotated(t, 3)
	b.next(t)
	want := b.joined(1, 5)
	eventually(t, "the follower to read bursts 1 to 4", func() bool { return got.Len() >= len(want) })
	// Close, like a client that goes away, ends the follower too.
	r.Close()
	select {
	case <-copied:
	case <-time.After(deadline):
		t.Fatal("the follower did not stop when closed")
	}
	if got.String() != want {
		t.Errorf("the follower read %d bytes, want bursts 1 to 4 (%d bytes)", got.Len(), len(want))
	}
	wait(t, d, h)
}

func TestLogsErrors(t *testing.T) {
	d := newDriver(t, exec.Config{})
	spec := testSpec(t, "true")
	ctx := ctxFor(t)
	if _, err := d.Logs(ctx, driver.Handle{}, spec, "stdin", false); err == nil || !strings.Contains(err.Error(), "stream:") {
		t.Errorf("Logs of a bad stream = %v", err)
	}
	if _, err := d.Logs(ctx, driver.Handle{}, spec, driver.Stdout, false); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("Logs of a container that never ran = %v, want not exist", err)
	}
	spec.Container = ".."
	if _, err := d.Logs(ctx, driver.Handle{}, spec, driver.Stdout, false); err == nil || !strings.Contains(err.Error(), "container:") {
		t.Errorf("Logs of a bad container name = %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
