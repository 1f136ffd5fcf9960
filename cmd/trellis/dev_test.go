package main

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/agent/tasks"
	"trellis.dev/trellis/internal/server"
)

// trellis dev with -data-dir secures its server-to-server port with
// certificates of its own and keeps the public ports plaintext; in memory
// it has no such port and no TLS.
func TestDevConfigTLS(t *testing.T) {
	base := serverFlags{httpAddr: "127.0.0.1:0", grpcAddr: "127.0.0.1:0", raftAddr: "127.0.0.1:0", serverAddr: "127.0.0.1:0"}
	mem, err := devConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	if mem.TLS != nil || mem.Raft != nil {
		t.Errorf("in memory: TLS %v, Raft %v; want neither", mem.TLS, mem.Raft)
	}
	withDir := base
	withDir.dataDir = t.TempDir()
	disk, err := devConfig(withDir)
	if err != nil {
		t.Fatal(err)
	}
	if disk.TLS == nil || !disk.PublicPlaintext || disk.Raft == nil {
		t.Fatalf("with -data-dir: TLS %v, PublicPlaintext %t, Raft %v; want TLS on the server port only", disk.TLS, disk.PublicPlaintext, disk.Raft)
	}
	if disk.TLS.FromFiles() {
		t.Error("dev's certificates come from files; want made in memory")
	}
}

// trellis server and trellis dev serve their plaintext HTTP API on
// loopback unless -http-addr names another address: with the TLS files
// too, remote callers use -https-addr. Dev needs nothing to configure.
func TestHTTPAddrDefaultsToLoopback(t *testing.T) {
	e := testEnv("", nil, nil, nil)
	for _, cmd := range []*cobra.Command{mustCmd(newServerCmd(e, server.DefaultModules())), mustCmd(newDevCmd(e, server.DefaultModules()))} {
		f := cmd.Flags().Lookup("http-addr")
		if f == nil {
			t.Fatalf("trellis %s has no -http-addr", cmd.Name())
		}
		host, _, err := net.SplitHostPort(f.DefValue)
		if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
			t.Errorf("trellis %s -http-addr defaults to %q; want a loopback address", cmd.Name(), f.DefValue)
		}
	}
}

// Dev waits for its tasks as long as their stop timeouts say, at least
// devLeaveTimeout, before it kills them.
func TestLeaveDeadline(t *testing.T) {
	began := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		stopping []tasks.StoppingTask
		want     time.Time
	}{
		{"nothing stopping", nil, began.Add(devLeaveTimeout)},
		{"short stop timeouts", []tasks.StoppingTask{{Task: "a", Since: began, Timeout: 5 * time.Second}}, began.Add(devLeaveTimeout)},
		{"a long stop timeout", []tasks.StoppingTask{{Task: "a", Since: began.Add(time.Second), Timeout: 10 * time.Minute}},
			began.Add(time.Second + 10*time.Minute + devKillTimeout)},
		{"not stopping yet", []tasks.StoppingTask{{Task: "a", Timeout: time.Hour}}, began.Add(devLeaveTimeout)},
	} {
		if got := leaveDeadline(began, tc.stopping); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Dev names a task that takes long to stop once, with its stop timeout
// and what is left of it.
func TestNoteWaits(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	stopping := []tasks.StoppingTask{
		{Task: "default/slow", Since: now.Add(-time.Minute), Timeout: 10 * time.Minute, Containers: []string{"main"}},
		{Task: "default/quick", Since: now.Add(-500 * time.Millisecond), Timeout: 30 * time.Second},
	}
	var b strings.Builder
	noted := map[string]bool{}
	noteWaits(&b, stopping, noted, now)
	noteWaits(&b, stopping, noted, now.Add(time.Second))
	want := "Waiting for task default/slow to stop (containers [main]): up to 10m0s after its SIGTERM (its stop timeout), 9m0s left. Press Ctrl-C again to kill it now.\n"
	if b.String() != want {
		t.Errorf("notes:\n%s\nwant:\n%s", b.String(), want)
	}
}
