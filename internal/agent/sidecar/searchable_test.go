package sidecar_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/agent/sidecar"
)

func TestSearchable(t *testing.T) {
	root := filepath.Join(t.TempDir(), "data")
	dir := filepath.Join(root, "tasks", "u1")
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := sidecar.Searchable(root, dir); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]os.FileMode{
		root:                         0o701,
		filepath.Join(root, "tasks"): 0o701,
		dir:                          0o701,
		filepath.Join(dir, "logs"):   0o700, // below dir: untouched
	} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", d, got, want)
		}
	}
	// Again: nothing changes.
	if err := sidecar.Searchable(root, dir); err != nil {
		t.Fatal(err)
	}
	if err := sidecar.Searchable(dir, root); err == nil || !strings.Contains(err.Error(), "is not under the data dir") {
		t.Errorf("a dir above root: %v", err)
	}
	if err := sidecar.Searchable(root, filepath.Join(root, "missing")); err == nil {
		t.Error("a missing dir: no error")
	}
}
