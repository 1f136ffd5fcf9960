package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHeaderText: the header's two lines are the ones every report began
// with before the commands shared them, to the character.
func TestHeaderText(t *testing.T) {
	at := time.Date(2026, 11, 25, 9, 30, 0, 0, time.FixedZone("CET", 3600))
	if got, want := title("cabench", at), "# cabench 2026-11-25T08:30:00Z\n\n"; got != want {
		t.Errorf("title = %q, want %q", got, want)
	}
	for _, tc := range []struct{ detail, want string }{
		{", server flags ``", "Trellis `/t/bin/trellis`, server flags ``. 2 CPUs; load average at the start 0.50 0.40 0.30.\n\n"},
		{"; etcd `etcd` (etcd Version: 3.4.30)", "Trellis `/t/bin/trellis`; etcd `etcd` (etcd Version: 3.4.30). 2 CPUs; load average at the start 0.50 0.40 0.30.\n\n"},
	} {
		if got := setting("/t/bin/trellis", tc.detail, 2, "0.50 0.40 0.30"); got != tc.want {
			t.Errorf("setting(%q) = %q, want %q", tc.detail, got, tc.want)
		}
	}
}

func TestBinary(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "trellis"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	got, err := Binary("trellis")
	if err != nil || got != filepath.Join(dir, "trellis") {
		t.Errorf("Binary(trellis) = %q, %v; want %q", got, err, filepath.Join(dir, "trellis"))
	}
	_, err = Binary("bin/trellis")
	if err == nil || !strings.HasPrefix(err.Error(), "-trellis: ") || !strings.HasSuffix(err.Error(), "(make build first)") {
		t.Errorf("Binary of a missing file: %v; want an error naming -trellis that says to build first", err)
	}
}

// TestStartEnd: a run's directory goes at the end unless kept, its report
// reaches the -out file, and a report that cannot be opened leaves no
// directory behind.
func TestStartEnd(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	outPath := filepath.Join(t.TempDir(), "report.md")

	r, err := Start("somebench", outPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(r.Dir), "somebench-") || filepath.Dir(r.Dir) != tmp {
		t.Errorf("working directory %s: want somebench-* in %s", r.Dir, tmp)
	}
	r.Header("/t/bin/trellis", "")
	r.End(false, "data dirs and logs")
	if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
		t.Errorf("the working directory is still there after End(false): %v", err)
	}
	b, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# somebench ") || !strings.Contains(string(b), "Trellis `/t/bin/trellis`. ") {
		t.Errorf("the -out file holds %q", b)
	}

	r, err = Start("somebench", "")
	if err != nil {
		t.Fatal(err)
	}
	r.End(true, "data dirs and logs")
	if _, err := os.Stat(r.Dir); err != nil {
		t.Errorf("End(true) did not keep the working directory: %v", err)
	}
	os.RemoveAll(r.Dir)

	if _, err := Start("somebench", filepath.Join(tmp, "missing", "report.md")); err == nil {
		t.Error("Start opened a report in a directory that does not exist")
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("a failed Start left %d entries in the temporary directory", len(ents))
	}
}
