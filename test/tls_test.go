package test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
)

// TestTLSClusterOfProcesses turns TLS on as docs/cluster.md says: `trellis
// tls ca create`, one `trellis tls cert create -server`, and the three
// -tls-* flags on every server. The servers form a cluster over mutual TLS
// (Raft and the server-to-server port), a write through a follower reaches
// every server, and no server warns of plaintext links or ports, only of
// what is open until ACLs exist.
func TestTLSClusterOfProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel() // a cluster test without a short TTL: see the package doc
	ctx := context.Background()
	dir := t.TempDir()
	bin := trellisBinary(t)
	pki := filepath.Join(dir, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = pki
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("trellis %v: %v\n%s", args, err, out)
		}
	}
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: dir, Servers: 3, Extra: []string{
		"-tls-ca-file", filepath.Join(pki, "trellis-agent-ca.pem"),
		"-tls-cert-file", filepath.Join(pki, "dc1-server-trellis-0.pem"),
		"-tls-key-file", filepath.Join(pki, "dc1-server-trellis-0-key.pem"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, m := range c.Members {
				b, _ := os.ReadFile(m.LogPath)
				t.Logf("--- %s log ---\n%s", m.Name, tail(b, 4000))
			}
		}
	})
	leader, err := c.WaitLeader(ctx, c.Members)
	if err != nil {
		t.Fatal(err)
	}
	var follower *testcluster.Member
	for _, m := range c.Members {
		if m != leader {
			follower = m
		}
	}
	// The HTTP API stays plaintext without -https-addr.
	fc, err := client.New(follower.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	ref := client.Ref{Type: wire.Type{Group: "core", GroupVersion: "v1", Kind: "Namespace"}, Name: "over-tls"}
	if err := testcluster.WaitFor(ctx, 30*time.Second, func() bool {
		_, err := fc.Write(ctx, ref, wire.WriteRequest{Data: []byte(`{}`)})
		return err == nil
	}); err != nil {
		t.Fatal("a write through a follower never succeeded")
	}
	for _, m := range c.Members {
		mc, err := client.New(m.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		if err := testcluster.WaitFor(ctx, 30*time.Second, func() bool {
			_, err := mc.Read(ctx, ref, false)
			return err == nil
		}); err != nil {
			t.Fatalf("%s never got the write", m.Name)
		}
		resp, err := http.Get("http://" + m.HTTPAddr + "/v1/health?stale=1")
		if err != nil {
			t.Fatal(err)
		}
		var h wire.Health
		err = json.NewDecoder(resp.Body).Decode(&h)
		resp.Body.Close()
		// With the TLS files every port but the loopback HTTP one is
		// secured; what is open until ACLs exist is said.
		if err != nil || len(h.Warnings) != 3 || h.Warnings[0] != server.WarnNoACLs || h.Warnings[1] != server.WarnSnapshotOpen ||
			!strings.HasPrefix(h.Warnings[2], "the HTTP API on 127.0.0.1:") || !strings.Contains(h.Warnings[2], "on loopback") {
			t.Errorf("%s health = %+v, %v; want the warnings of ACLs off, the open snapshot route and the loopback HTTP port, and no other", m.Name, h, err)
		}
	}
}
