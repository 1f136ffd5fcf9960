package etcdpeer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

func TestArgs(t *testing.T) {
	ms := []Member{
		{Name: "e0", ClientAddr: "127.0.0.1:1000", PeerAddr: "127.0.0.1:1001"},
		{Name: "e1", ClientAddr: "127.0.0.1:1002", PeerAddr: "127.0.0.1:1003"},
	}
	want := []string{"--name", "e1", "--data-dir", "/d/etcd1",
		"--listen-client-urls", "http://127.0.0.1:1002", "--advertise-client-urls", "http://127.0.0.1:1002",
		"--listen-peer-urls", "http://127.0.0.1:1003", "--initial-advertise-peer-urls", "http://127.0.0.1:1003",
		"--initial-cluster", "e0=http://127.0.0.1:1001,e1=http://127.0.0.1:1003",
		"--initial-cluster-state", "new", "--initial-cluster-token", "somebench",
		"--log-level", "warn"}
	if got := Args(ms, 1, "/d/etcd1", "somebench"); !slices.Equal(got, want) {
		t.Errorf("Args =\n%q\nwant\n%q", got, want)
	}
}

func TestLayout(t *testing.T) {
	ms, err := Layout(3)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, m := range ms {
		if want := "e" + string(rune('0'+i)); m.Name != want {
			t.Errorf("member %d is named %s, want %s", i, m.Name, want)
		}
		for _, a := range []string{m.ClientAddr, m.PeerAddr} {
			if seen[a] || !strings.HasPrefix(a, "127.0.0.1:") {
				t.Errorf("address %s: repeated or not on loopback", a)
			}
			seen[a] = true
		}
	}
}

// TestWaitHealthy: the wait ends when every member answers /health as
// etcd does when healthy, and not while one says it is not.
func TestWaitHealthy(t *testing.T) {
	var healthy atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			http.NotFound(w, r)
			return
		}
		if healthy.Load() {
			w.Write([]byte(`{"health":"true","reason":""}`))
		} else {
			w.Write([]byte(`{"health":"false","reason":"RAFT NO LEADER"}`))
		}
	}))
	defer srv.Close()
	ms := []Member{{Name: "e0", ClientAddr: strings.TrimPrefix(srv.URL, "http://")}}

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WaitHealthy(ended, ms); err == nil {
		t.Error("WaitHealthy returned nil while the member said it was not healthy")
	}
	healthy.Store(true)
	if err := WaitHealthy(context.Background(), ms); err != nil {
		t.Errorf("WaitHealthy of a healthy member: %v", err)
	}
}

func TestVersion(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "etcd")
	script := "#!/bin/sh\necho 'etcd Version: 3.4.30 '\necho 'Git SHA: Not provided'\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, want := Version(bin), "etcd Version: 3.4.30"; got != want {
		t.Errorf("Version = %q, want %q", got, want)
	}
	if got, want := Version(filepath.Join(t.TempDir(), "missing")), "version unknown"; got != want {
		t.Errorf("Version of a missing binary = %q, want %q", got, want)
	}
}
