package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/testcluster"
)

// trellis snapshot save writes a file only its owner can read (it holds
// the CA's private keys), whatever was at FILE or FILE.part before: a
// readable file, or a link to elsewhere, which is left untouched. The
// file restores.
func TestSnapshotSaveWritesAPrivateFile(t *testing.T) {
	// Its own Raft and server ports: the defaults (7702, 7703) may be
	// taken by another test's server on a shared machine.
	ports, err := testcluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	addr := startDev(t, "-data-dir", t.TempDir(),
		"-raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "-server-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]))
	dir := t.TempDir()
	file := filepath.Join(dir, "backup.snap")
	elsewhere := filepath.Join(dir, "elsewhere")
	for path, content := range map[string]string{file: "an old backup", elsewhere: "not a snapshot"} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(elsewhere, file+".part"); err != nil {
		t.Fatal(err)
	}

	out := mustRun(t, "", "snapshot", "save", "-addr", addr, file)
	if !strings.Contains(out, "saved snapshot to "+file) {
		t.Errorf("snapshot save printed %q", out)
	}
	info, err := os.Lstat(file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode() != 0o600 {
		t.Errorf("the snapshot file's mode is %v, want -rw------- (0600)", info.Mode())
	}
	if _, err := os.Lstat(file + ".part"); !os.IsNotExist(err) {
		t.Errorf("%s.part is still there: %v", file, err)
	}
	if b, err := os.ReadFile(elsewhere); err != nil || string(b) != "not a snapshot" {
		t.Errorf("the file the old .part linked to = %q, %v; want it untouched", b, err)
	}
	mustRun(t, "", "snapshot", "restore", "-addr", addr, file)
}
