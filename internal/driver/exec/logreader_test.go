package exec

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// These tests drive rotateFile and logReader by hand, so that each
// interleaving of reads, writes and rotations happens exactly as written.

type logFixture struct {
	t    *testing.T
	path string
	w    *os.File
	log  logFile
	keep int
}

func newLogFixture(t *testing.T, keep int) *logFixture {
	path := filepath.Join(t.TempDir(), "app.stdout")
	w, err := openLog(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &logFixture{t: t, path: path, w: w, keep: keep}
}

func (f *logFixture) write(s string) {
	if _, err := f.w.WriteString(s); err != nil {
		f.t.Fatal(err)
	}
}

// rotate rotates as the rotator does, under the lock; max 1 byte so that
// any content rotates.
func (f *logFixture) rotate() {
	f.log.mu.Lock()
	defer f.log.mu.Unlock()
	did, err := rotateFile(f.path, 1, f.keep)
	if err != nil {
		f.t.Fatal(err)
	}
	if did {
		f.log.rotations++
	}
}

func (f *logFixture) reader(follow bool) *logReader {
	r, err := openLogReader(context.Background(), f.path, f.keep, &f.log, follow, time.Millisecond)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { r.Close() })
	return r
}

// read reads what the reader has now, without waiting for more.
func read(t *testing.T, r *logReader) string {
	t.Helper()
	var sb strings.Builder
	buf := make([]byte, 3) // small reads cross file boundaries
	for {
		n, err := r.readSome(buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return sb.String()
		}
		sb.Write(buf[:n])
	}
}

func (f *logFixture) file(i int) string {
	p := f.path
	if i > 0 {
		p = rotatedPath(p, i)
	}
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return "<none>"
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return string(b)
}

func TestRotateFile(t *testing.T) {
	f := newLogFixture(t, 2)
	// Below the limit nothing happens.
	f.write("abc")
	if did, err := rotateFile(f.path, 10, 2); did || err != nil {
		t.Fatalf("rotateFile below the limit = %v, %v", did, err)
	}
	for i, s := range []string{"one\n", "two\n", "three\n"} {
		if i > 0 {
			f.write(s)
		} else {
			f.w.Truncate(0)
			f.write(s)
		}
		if did, err := rotateFile(f.path, 1, 2); !did || err != nil {
			t.Fatalf("rotateFile = %v, %v", did, err)
		}
	}
	got := []string{f.file(0), f.file(1), f.file(2), f.file(3)}
	want := []string{"", "three\n", "two\n", "<none>"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("files = %q, want %q", got, want)
	}
	// The writer's O_APPEND offset follows the truncation.
	f.write("four\n")
	if got := f.file(0); got != "four\n" {
		t.Errorf("after a write the file holds %q", got)
	}
	if _, err := os.Stat(f.path + ".rotating"); !os.IsNotExist(err) {
		t.Errorf("the temporary file was left behind (%v)", err)
	}
	// A missing file is not an error.
	if did, err := rotateFile(filepath.Join(t.TempDir(), "none"), 1, 2); did || err != nil {
		t.Errorf("rotateFile of a missing file = %v, %v", did, err)
	}
}

func TestRotateFileKeepingNothing(t *testing.T) {
	f := newLogFixture(t, 0)
	f.write("data\n")
	if did, err := rotateFile(f.path, 1, 0); !did || err != nil {
		t.Fatalf("rotateFile = %v, %v", did, err)
	}
	if f.file(0) != "" || f.file(1) != "<none>" {
		t.Errorf("files = %q, %q", f.file(0), f.file(1))
	}
}

func TestLogReaderAcrossRotations(t *testing.T) {
	cases := []struct {
		name  string
		steps func(f *logFixture, r *logReader, got *strings.Builder)
		want  string
	}{
		{"rotation after a partial read", func(f *logFixture, r *logReader, got *strings.Builder) {
			f.write("aaaa\n")
			got.WriteString(read(f.t, r))
			f.write("bbbb\n") // unread when the rotation comes
			f.rotate()
			f.write("cccc\n")
		}, "aaaa\nbbbb\ncccc\n"},
		{"rotation after a full read", func(f *logFixture, r *logReader, got *strings.Builder) {
			f.write("aaaa\n")
			got.WriteString(read(f.t, r))
			f.rotate()
			f.write("bb\n") // shorter than what was read: must not be taken for more of the old
		}, "aaaa\nbb\n"},
		{"refilled past the old offset", func(f *logFixture, r *logReader, got *strings.Builder) {
			f.write("aa\n")
			got.WriteString(read(f.t, r))
			f.rotate()
			f.write("bbbbbbbb\n") // longer than what was read
		}, "aa\nbbbbbbbb\n"},
		{"two rotations between reads", func(f *logFixture, r *logReader, got *strings.Builder) {
			f.write("aa\n")
			got.WriteString(read(f.t, r))
			f.write("bb\n")
			f.rotate()
			f.write("cc\n")
			f.rotate()
			f.write("dd\n")
		}, "aa\nbb\ncc\ndd\n"},
		{"rotation before anything was read", func(f *logFixture, r *logReader, got *strings.Builder) {
			f.write("aa\n")
			f.rotate()
			f.write("bb\n")
		}, "aa\nbb\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newLogFixture(t, 2)
			r := f.reader(true)
			var got strings.Builder
			tc.steps(f, r, &got)
			got.WriteString(read(t, r))
			if got.String() != tc.want {
				t.Errorf("read %q, want %q", got.String(), tc.want)
			}
		})
	}
}

// More rotations between two reads than files kept: what was dropped is
// lost, the rest is read whole and in order.
func TestLogReaderFallsBehind(t *testing.T) {
	f := newLogFixture(t, 2)
	f.write("00\n")
	f.rotate() // so that the reader knows a .1 to look for
	f.write("aa\n")
	r := f.reader(true)
	if got := read(t, r); got != "00\naa\n" {
		t.Fatalf("read %q", got)
	}
	for _, s := range []string{"bb\n", "cc\n", "dd\n"} {
		f.write(s)
		f.rotate()
	}
	f.write("ee\n")
	// aa+bb went to a .1 that has been dropped since; cc and dd are kept.
	if got := read(t, r); got != "cc\ndd\nee\n" {
		t.Errorf("read %q, want the kept files whole, then the current one", got)
	}
}

// A reader opened after rotations reads the kept files oldest first, and
// a rotation while it is still in the old files loses nothing.
func TestLogReaderOpenedLate(t *testing.T) {
	f := newLogFixture(t, 2)
	for _, s := range []string{"1\n", "2\n", "3\n"} {
		f.write(s)
		f.rotate()
	}
	f.write("4\n")
	r := f.reader(false)
	buf := make([]byte, 1)
	if n, err := r.readSome(buf); n != 1 || err != nil || string(buf) != "2" {
		t.Fatalf("first byte = %q, %d, %v; want 2 (1 was dropped)", buf, n, err)
	}
	f.rotate() // "4\n" goes to .1 before the reader reaches it
	f.write("5\n")
	if got := read(t, r); got != "\n3\n4\n5\n" {
		t.Errorf("read %q, want the rest in order", got)
	}
}

func TestLogReaderWithNothingKept(t *testing.T) {
	f := newLogFixture(t, 0)
	r := f.reader(true)
	f.write("aaaa\n")
	if got := read(t, r); got != "aaaa\n" {
		t.Fatalf("read %q", got)
	}
	f.rotate()
	f.write("b\n")
	if got := read(t, r); got != "b\n" {
		t.Errorf("after truncation read %q, want the new content from the top", got)
	}
}

func TestLogReaderFollowEnds(t *testing.T) {
	f := newLogFixture(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	r, err := openLogReader(ctx, f.path, 2, &f.log, true, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f.write("x\n")
	done := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	cancel()
	select {
	case got := <-done:
		if got != "x\n" && got != "" {
			t.Errorf("read %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a following reader did not end with its context")
	}
	// Reading a closed reader fails instead of blocking.
	r.Close()
	if _, err := r.Read(make([]byte, 1)); err == nil {
		t.Error("Read after Close succeeded")
	}
}

func TestParseRealProcStat(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc")
	}
	got, err := parseProcStat(b)
	if err != nil {
		t.Fatal(err)
	}
	// This binary's name has no spaces, so plain fields line up.
	if want := strings.Fields(string(b))[21]; fmt.Sprint(got.StartTicks) != want {
		t.Errorf("start ticks = %d, want field 22 = %s", got.StartTicks, want)
	}
}
