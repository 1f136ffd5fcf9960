package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
)

// startRaft runs a single-server Raft cluster on dataDir until the test
// ends or the returned stop is called.
func startRaft(t *testing.T, dataDir string) (*client.Client, func()) {
	t.Helper()
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), ServerAddr: "127.0.0.1:0",
		Raft:            &server.RaftConfig{DataDir: dataDir, BootstrapExpect: 1, SingleServer: true},
		ShutdownTimeout: 20 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start = %v", err)
		}
	}
	t.Cleanup(stop)
	c, err := client.New("http://" + srv.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	if err := testcluster.WaitFor(ctx, 30*time.Second, func() bool { return c.Health(ctx) == nil }); err != nil {
		t.Fatal("single-server Raft cluster never became healthy")
	}
	return c, stop
}

// A Raft-backed server keeps what it acknowledged across a restart, and
// its operator endpoints work: peers, snapshot save and restore.
func TestRaftServerKeepsDataAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c, stop := startRaft(t, dir)
	ref := client.Ref{Type: namespaces, Name: "payments"}
	if _, err := c.Write(ctx, ref, wire.WriteRequest{Data: []byte(`{"description":"before"}`)}); err != nil {
		t.Fatal(err)
	}
	peers, err := c.RaftPeers(ctx)
	if err != nil || len(peers) != 1 || !peers[0].Leader || !peers[0].Voter {
		t.Fatalf("RaftPeers = %+v, %v; want one voter that leads", peers, err)
	}
	var snap bytes.Buffer
	if _, err := c.SaveSnapshot(ctx, &snap); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(ctx, ref, wire.WriteRequest{Data: []byte(`{"description":"after"}`)}); err != nil {
		t.Fatal(err)
	}
	stop()

	c, _ = startRaft(t, dir)
	got, err := c.Read(ctx, ref, true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got.Data, []byte(`"after"`)) {
		t.Fatalf("after restart data = %s, want the last acknowledged write", got.Data)
	}
	if err := c.RestoreSnapshot(ctx, bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatal(err)
	}
	got, err = c.Read(ctx, ref, true)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got.Data, []byte(`"before"`)) {
		t.Fatalf("after restore data = %s, want the snapshot's", got.Data)
	}
	if err := c.RestoreSnapshot(ctx, bytes.NewReader([]byte("not a snapshot"))); !client.IsCode(err, wire.CodeInvalidArgument) {
		t.Fatalf("restoring garbage = %v, want invalid_argument", err)
	}
}

// A Raft server without TLS files runs, and says in every health answer
// that its links to other servers are plaintext, first, then that ACLs
// are not enforced and its snapshot route is open.
func TestPlaintextRaftServerWarnsInHealth(t *testing.T) {
	c, _ := startRaft(t, t.TempDir())
	resp, err := http.Get(c.Addr() + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h wire.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || h.Status != "ok" || len(h.Warnings) < 3 ||
		!slices.Equal(h.Warnings[:3], []string{server.WarnPlaintext, server.WarnNoACLs, server.WarnSnapshotOpen}) {
		t.Fatalf("health = %d %+v, want ok with warnings [%q %q %q ...]", resp.StatusCode, h, server.WarnPlaintext, server.WarnNoACLs, server.WarnSnapshotOpen)
	}
	if h.Datacenter != "dc1" {
		t.Errorf("health names datacenter %q, want the default dc1", h.Datacenter)
	}
}

// An in-memory server of another datacenter names it in its health
// answer, and hands it to its modules.
func TestHealthNamesTheDatacenter(t *testing.T) {
	var seen string
	mods := append(server.DefaultModules(), datacenterProbe{seen: &seen})
	srv, err := server.New(server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Datacenter: "eu-west-1", Modules: mods})
	if err != nil {
		t.Fatal(err)
	}
	if seen != "eu-west-1" {
		t.Errorf("the modules were told datacenter %q, want eu-west-1", seen)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	defer func() { cancel(); <-done }()
	var h wire.Health
	if err := testcluster.WaitFor(ctx, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + srv.HTTPAddr() + "/v1/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&h) == nil
	}); err != nil {
		t.Fatal(err)
	}
	if h.Datacenter != "eu-west-1" {
		t.Errorf("health = %+v, want datacenter eu-west-1", h)
	}
}

// datacenterProbe is a module that records the datacenter Setup is given.
type datacenterProbe struct{ seen *string }

func (datacenterProbe) Name() string                { return "probe" }
func (datacenterProbe) Register(*resource.Registry) {}
func (p datacenterProbe) Setup(d module.Deps) (module.Parts, error) {
	*p.seen = d.Cluster.Datacenter
	return module.Parts{}, nil
}
