package agent

import (
	"path/filepath"
	"testing"
)

// An agent's identity is made once per data dir and kept there: the same
// after a restart, another for another data dir (another dev run).
func TestIdentity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	first, err := Identity(dir)
	if err != nil || first == "" {
		t.Fatalf("Identity: %q, %v", first, err)
	}
	again, err := Identity(dir)
	if err != nil || again != first {
		t.Fatalf("Identity after a restart: %q, %v; want %q", again, err, first)
	}
	other, err := Identity(filepath.Join(t.TempDir(), "a"))
	if err != nil || other == first {
		t.Fatalf("Identity of another data dir: %q, %v; want another than %q", other, err, first)
	}
}
