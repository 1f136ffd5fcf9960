package main

import (
	"net"
	"net/netip"
	"testing"

	"github.com/spf13/cobra"
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
	for _, cmd := range []*cobra.Command{newServerCmd(e), newDevCmd(e)} {
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
