// Package etcdpeer is what the benchmarks that measure Trellis beside etcd
// (peerbench, orchbench) share to run etcd the same way: the members'
// places on loopback, the flags that start each with etcd's defaults
// (fsync on every commit), the wait until every member says it is
// healthy, and the version a report names. How the processes are started
// and ended stays with each command.
package etcdpeer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"trellis.dev/trellis/internal/testcluster"
)

// Member is one member of an etcd cluster on 127.0.0.1.
type Member struct {
	Name       string // e0, e1, ...
	ClientAddr string // host:port of its client URL: the gRPC API and /health
	PeerAddr   string // host:port of its peer URL
}

// Layout places the n members of a cluster on free ports.
func Layout(n int) ([]Member, error) {
	ports, err := testcluster.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{
			Name:       fmt.Sprintf("e%d", i),
			ClientAddr: fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
			PeerAddr:   fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
		}
	}
	return ms, nil
}

// Args are the flags that start member i of the cluster ms, named token,
// with its data in dataDir.
func Args(ms []Member, i int, dataDir, token string) []string {
	var initial []string
	for _, m := range ms {
		initial = append(initial, m.Name+"=http://"+m.PeerAddr)
	}
	client, peer := "http://"+ms[i].ClientAddr, "http://"+ms[i].PeerAddr
	return []string{"--name", ms[i].Name,
		"--data-dir", dataDir,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(initial, ","),
		"--initial-cluster-state", "new", "--initial-cluster-token", token,
		"--log-level", "warn"}
}

// WaitHealthy waits, a minute at most, until every member's /health says
// it is healthy.
func WaitHealthy(ctx context.Context, ms []Member) error {
	client := http.Client{Timeout: 2 * time.Second}
	return testcluster.WaitFor(ctx, 60*time.Second, func() bool {
		for _, m := range ms {
			resp, err := client.Get("http://" + m.ClientAddr + "/health")
			if err != nil {
				return false
			}
			var h struct{ Health string }
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.Health != "true" {
				return false
			}
		}
		return true
	})
}

// Version is the first line of `bin --version`, or "version unknown".
func Version(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "version unknown"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}
