package devrun

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"trellis.dev/trellis/internal/tasknet"
)

// fakeEngine records what the sweep asks of the engine: which label
// values (run dirs) it says are dead.
type fakeEngine struct {
	values []string
	dead   map[string]bool
}

func (f *fakeEngine) RemoveMarked(_ context.Context, key string, dead func(string) bool) (int, error) {
	if key != LabelRun {
		return 0, nil
	}
	f.dead = map[string]bool{}
	n := 0
	for _, v := range f.values {
		f.dead[v] = dead(v)
		if f.dead[v] {
			n++
		}
	}
	return n, nil
}

// A run whose process is gone (its lock free) is swept, directory and
// containers; a live run, an unlocked directory of an older dev and a
// label that names no run's directory are left alone.
func TestSweepOnlyDeadRuns(t *testing.T) {
	tmp := t.TempDir()
	live, err := Start(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close(context.Background())
	dead, err := Start(tmp)
	if err != nil {
		t.Fatal(err)
	}
	dead.lock.Close() // as its process's death would
	older := filepath.Join(tmp, dirPrefix+"older")
	if err := os.Mkdir(older, 0o700); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(tmp, dirPrefix+"removed-long-ago")
	eng := &fakeEngine{values: []string{live.Dir(), dead.Dir(), older, gone, "/etc", "relative/" + dirPrefix + "x"}}

	swept, err := Sweep(context.Background(), tmp, eng, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if len(swept.Runs) != 1 || swept.Runs[0] != dead.ID() {
		t.Errorf("swept runs %v, want [%s]", swept.Runs, dead.ID())
	}
	for dir, want := range map[string]bool{live.Dir(): true, dead.Dir(): false, older: true} {
		if _, err := os.Stat(dir); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", dir, err == nil, want)
		}
	}
	for v, want := range map[string]bool{live.Dir(): false, dead.Dir(): true, older: false, gone: true, "/etc": false, "relative/" + dirPrefix + "x": false} {
		if eng.dead[v] != want {
			t.Errorf("containers labelled %s removed: %v, want %v", v, eng.dead[v], want)
		}
	}
	if swept.Containers != 2 {
		t.Errorf("containers removed: %d, want 2", swept.Containers)
	}
}

// A run records its agents' networks for the sweep, and Close removes its
// directory.
func TestRunRecordsAndCloses(t *testing.T) {
	r, err := Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.RecordNetwork("dev-1", tasknetConfig(r.Dir())); err != nil {
		t.Fatal(err)
	}
	nets, err := readNetworks(r.Dir())
	if err != nil || nets["dev-1"].Bridge != "trtest0" || nets["dev-1"].Subnet.String() != "10.9.8.0/24" {
		t.Fatalf("recorded networks %+v, %v", nets, err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Dir()); !os.IsNotExist(err) {
		t.Errorf("the run's directory after Close: %v", err)
	}
}

func tasknetConfig(dir string) tasknet.Config {
	c := tasknet.DefaultConfig(filepath.Join(dir, "dev-1", "network"))
	c.Bridge, c.Subnet = "trtest0", netip.MustParsePrefix("10.9.8.0/24")
	return c
}
