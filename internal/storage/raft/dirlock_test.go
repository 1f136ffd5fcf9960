package raft

import (
	"strings"
	"testing"
)

// A second server on the same data directory fails at once, naming why;
// once the first is shut down, the directory can be opened again.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{ID: "a", DataDir: dir, RaftAddr: "127.0.0.1:0", ServerAddr: "127.0.0.1:1", Logger: testLogger(t), Tuning: testTuning()}
	first, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second Open on the same DataDir = %v, want an in-use error", err)
	}
	if err := first.Shutdown(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open after Shutdown: %v", err)
	}
	if err := again.Shutdown(); err != nil {
		t.Fatal(err)
	}
}
