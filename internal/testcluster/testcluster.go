// Package testcluster starts real `trellis server` and `trellis agent`
// processes on loopback, for the multi-process tests in test/ and for the
// benchmarks in bench/. It is the harness, not the thing under test: it only
// launches the binary with the documented flags and reads the documented
// HTTP status endpoints. Package dockerhost, beside it, looks at the host's
// Docker engine.
package testcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Build compiles cmd/trellis into dir and returns the binary's path. It must
// run inside the trellis module (tests do).
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "trellis")
	cmd := exec.Command("go", "build", "-o", bin, "trellis.dev/trellis/cmd/trellis")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// Member is one server process.
type Member struct {
	Name     string
	HTTPAddr string
	GRPCAddr string
	RaftAddr string
	// ServerAddr is the server-to-server port, which -retry-join names.
	ServerAddr string
	// DNSAddr is the DNS interface (-dns-addr), UDP and TCP.
	DNSAddr string
	DataDir string
	LogPath string

	process
}

// Cluster is a set of servers started to form one cluster.
type Cluster struct {
	Members []*Member
}

// Options says what to start.
type Options struct {
	Bin     string // the trellis binary
	Dir     string // where data dirs and logs go
	Servers int
	// Extra flags for every server.
	Extra []string
}

// Start launches the servers with -bootstrap-expect and -retry-join naming
// each other, and waits until all of them agree on a leader.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	ports, err := FreePorts(5 * o.Servers)
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	var serverAddrs []string
	for i := range o.Servers {
		serverAddrs = append(serverAddrs, fmt.Sprintf("127.0.0.1:%d", ports[5*i+3]))
	}
	for i := range o.Servers {
		m := &Member{
			Name:       fmt.Sprintf("server%d", i),
			HTTPAddr:   fmt.Sprintf("127.0.0.1:%d", ports[5*i]),
			GRPCAddr:   fmt.Sprintf("127.0.0.1:%d", ports[5*i+1]),
			RaftAddr:   fmt.Sprintf("127.0.0.1:%d", ports[5*i+2]),
			ServerAddr: serverAddrs[i],
			DNSAddr:    fmt.Sprintf("127.0.0.1:%d", ports[5*i+4]),
			DataDir:    filepath.Join(o.Dir, fmt.Sprintf("server%d", i)),
			LogPath:    filepath.Join(o.Dir, fmt.Sprintf("server%d.log", i)),
		}
		m.process = process{name: m.Name, bin: o.Bin, logPath: m.LogPath}
		m.args = []string{"server",
			"-data-dir", m.DataDir,
			"-http-addr", m.HTTPAddr,
			"-grpc-addr", m.GRPCAddr,
			"-raft-addr", m.RaftAddr,
			"-server-addr", m.ServerAddr,
			"-dns-addr", m.DNSAddr,
			"-bootstrap-expect", strconv.Itoa(o.Servers),
		}
		for j, a := range serverAddrs {
			if j != i {
				m.args = append(m.args, "-retry-join", a)
			}
		}
		m.args = append(m.args, o.Extra...)
		if err := m.Start(); err != nil {
			c.Stop()
			return nil, err
		}
		c.Members = append(c.Members, m)
	}
	if _, err := c.WaitLeader(ctx, c.Members); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Leader asks the member who the leader is (its Raft address, "" for none).
func (m *Member) Leader() (string, error) {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + m.HTTPAddr + "/v1/status/leader")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var leader string
	err = json.NewDecoder(resp.Body).Decode(&leader)
	return leader, err
}

// Stop ends every member.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.Stop()
	}
}

// WaitLeader waits until every member of among names the same leader, which
// is one of the cluster's members, and returns it.
func (c *Cluster) WaitLeader(ctx context.Context, among []*Member) (*Member, error) {
	var leader *Member
	err := WaitFor(ctx, 60*time.Second, func() bool {
		var addr string
		for _, m := range among {
			l, err := m.Leader()
			if err != nil || l == "" || (addr != "" && l != addr) {
				return false
			}
			addr = l
		}
		for _, m := range c.Members {
			if m.RaftAddr == addr {
				leader = m
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("no agreed leader among %d servers: %w (logs beside %s)", len(among), err, c.Members[0].LogPath)
	}
	return leader, nil
}

// WaitFor polls ok every 50 ms until it holds, ctx ends or limit passes.
func WaitFor(ctx context.Context, limit time.Duration, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !ok() {
		select {
		case <-ctx.Done():
			return errors.New("condition not met in time")
		case <-t.C:
		}
	}
	return nil
}

// FreePorts returns n distinct ports that were free on 127.0.0.1, chosen
// at random below the kernel's range of ephemeral ports. Servers and
// agents are restarted on their ports, and a port of that range may be
// taken meanwhile as the local end of any outbound connection on the
// machine: a server restarted under a write load found its Raft port so
// taken and could not start ("address already in use").
func FreePorts(n int) ([]int, error) {
	lo, _, ok := parsePortRange(readFile("/proc/sys/net/ipv4/ip_local_port_range"))
	if !ok {
		lo = 32768 // Linux's default
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	taken := map[int]bool{}
	for attempt := 0; len(ports) < n; attempt++ {
		addr := "127.0.0.1:0" // the kernel's choice, when no port below the range is free
		if lo-minPort >= n && attempt < 100*n {
			p := minPort + rand.IntN(lo-minPort)
			if taken[p] {
				continue
			}
			addr = fmt.Sprintf("127.0.0.1:%d", p)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, err
			}
			continue // in use
		}
		ls = append(ls, l)
		p := l.Addr().(*net.TCPAddr).Port
		taken[p] = true
		ports = append(ports, p)
	}
	return ports, nil
}

// minPort is the lowest port FreePorts hands out, above the ports that
// services commonly listen on.
const minPort = 10000

// parsePortRange reads ip_local_port_range ("32768\t60999\n").
func parsePortRange(s string) (lo, hi int, ok bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi < lo || hi > 65535 {
		return 0, 0, false
	}
	return lo, hi, true
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}
