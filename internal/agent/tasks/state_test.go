package tasks

import (
	"os"
	"path/filepath"
	"testing"

	"trellis.dev/trellis/internal/orchestrator"
)

func TestLocalState(t *testing.T) {
	d := stateDir{t.TempDir()}
	if err := d.init(); err != nil {
		t.Fatal(err)
	}
	def, err := encodeDefinition(shDefinition("web", "exec sleep 1"))
	if err != nil {
		t.Fatal(err)
	}
	r := &record{Namespace: "default", Name: "t1", UID: "01ABC", Definition: def, Token: "tok",
		Snapshot: Snapshot{Status: orchestrator.StatusRunning, State: []byte(`{"pids":{"app":42}}`)}, Started: true}
	if err := d.saveRecord(r); err != nil {
		t.Fatal(err)
	}
	// A record someone damaged, a record under the wrong name, what a
	// killed agent left half written, and a finished task's directory.
	if err := os.WriteFile(filepath.Join(d.tasksDir(), "01BAD.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.tasksDir(), "01XYZ.json"), []byte(`{"uid":"01OTHER"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.tasksDir(), ".01ABC.json.tmp123"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"01ABC", "01OLD"} {
		if err := os.MkdirAll(TaskDir(d.root, dir), 0o700); err != nil {
			t.Fatal(err)
		}
	}

	got, errs := d.loadRecords()
	if len(got) != 1 || len(errs) != 2 {
		t.Fatalf("loaded %d records and %d errors (%v); want 1 and 2", len(got), len(errs), errs)
	}
	back, err := got[0].definition()
	if err != nil || back.GetFamily() != "web" || got[0].Token != "tok" || string(got[0].Snapshot.State) != `{"pids":{"app":42}}` {
		t.Errorf("record read back: %+v %v %v", got[0], back, err)
	}
	d.removeOrphans(map[string]bool{"01ABC": true})
	for path, want := range map[string]bool{
		TaskDir(d.root, "01ABC"):                          true,
		TaskDir(d.root, "01OLD"):                          false,
		filepath.Join(d.tasksDir(), ".01ABC.json.tmp123"): false,
		filepath.Join(d.tasksDir(), "01BAD.json"):         true, // left for a person to look at
	} {
		if _, err := os.Stat(path); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", path, err == nil, want)
		}
	}
	if err := d.removeTask("01ABC"); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.loadRecords(); len(got) != 0 {
		t.Errorf("removed record still loads")
	}
}
