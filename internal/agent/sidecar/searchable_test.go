package sidecar_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/agent/sidecar"
)

func TestSearchable(t *testing.T) {
	top := t.TempDir()
	// t.TempDir's own directories are private; the data dir's parents
	// must be searchable.
	for d := top; d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(top, "data")
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

func TestSearchableRefusesAPrivateParent(t *testing.T) {
	private := t.TempDir() // 0700
	root := filepath.Join(private, "data")
	dir := filepath.Join(root, "tasks", "u1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	err := sidecar.Searchable(root, dir)
	if err == nil || !strings.Contains(err.Error(), "(a parent of the data dir "+root+") is not searchable by others") {
		t.Fatalf("Searchable under a private parent: %v", err)
	}
}

func TestCheckExecutable(t *testing.T) {
	top := t.TempDir()
	for d := top; d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(top, "bin")
	if err := os.Mkdir(bin, 0o700); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(bin, "trellis")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := sidecar.CheckExecutable(exe); err == nil || !strings.Contains(err.Error(), exe+" is not executable by others") {
		t.Errorf("a file private to its owner: %v", err)
	}
	if err := os.Chmod(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sidecar.CheckExecutable(exe); err == nil || !strings.Contains(err.Error(), bin+" (above "+exe+") is not searchable by others") {
		t.Errorf("a private directory above it: %v", err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sidecar.CheckExecutable(exe); err != nil {
		t.Errorf("a program anyone may run: %v", err)
	}
	if err := sidecar.CheckExecutable(filepath.Join(bin, "missing")); err == nil {
		t.Error("a missing program: no error")
	}
}
