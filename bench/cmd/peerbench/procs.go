package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"trellis.dev/trellis/internal/testcluster"
)

// member is one server process of either system.
type member struct {
	httpAddr string // trellis only
	grpcAddr string // trellis: the resource service; etcd: the client URL's host:port
	rss      func() (int64, error)
	pid      int
}

// cluster is a running Trellis or etcd cluster.
type cluster struct {
	members []*member
	stop    func()
}

// startTrellis starts n `trellis server` processes that form one cluster.
func startTrellis(ctx context.Context, bin string, extra []string, dir string, n int) (*cluster, error) {
	sub, err := os.MkdirTemp(dir, "trellis-")
	if err != nil {
		return nil, err
	}
	tc, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: sub, Servers: n, Extra: extra})
	if err != nil {
		return nil, err
	}
	c := &cluster{stop: tc.Stop}
	for _, m := range tc.Members {
		if len(extra) > 0 {
			log.Printf("trellis server %s: http://%s (raft %s)", m.Name, m.HTTPAddr, m.RaftAddr)
		}
		c.members = append(c.members, &member{httpAddr: m.HTTPAddr, grpcAddr: m.GRPCAddr, rss: m.RSS, pid: m.PID()})
	}
	return c, nil
}

// startEtcd starts an n-member etcd cluster with its default durability
// (fsync on every commit).
func startEtcd(ctx context.Context, bin, dir string, n int) (*cluster, error) {
	sub, err := os.MkdirTemp(dir, "etcd-")
	if err != nil {
		return nil, err
	}
	ports, err := testcluster.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	var procs []*exec.Cmd
	c := &cluster{stop: func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}}
	for i := range n {
		client := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		logf, err := os.Create(filepath.Join(sub, fmt.Sprintf("etcd%d.log", i)))
		if err != nil {
			c.stop()
			return nil, err
		}
		cmd := exec.Command(bin,
			"--name", fmt.Sprintf("e%d", i),
			"--data-dir", filepath.Join(sub, fmt.Sprintf("etcd%d", i)),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "peerbench",
			"--log-level", "warn")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			c.stop()
			return nil, fmt.Errorf("start etcd: %w", err)
		}
		procs = append(procs, cmd)
		pid := cmd.Process.Pid
		c.members = append(c.members, &member{
			grpcAddr: strings.TrimPrefix(client, "http://"),
			rss:      func() (int64, error) { return pidRSS(pid) },
			pid:      pid,
		})
	}
	err = testcluster.WaitFor(ctx, 60*time.Second, func() bool {
		for _, m := range c.members {
			resp, err := http.Get("http://" + m.grpcAddr + "/health")
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
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("etcd cluster of %d did not become healthy: %w (logs in %s)", n, err, sub)
	}
	return c, nil
}

func pidRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", pid))
	if err != nil {
		return 0, err
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return 0, err
	}
	return resident * int64(os.Getpagesize()), nil
}

// cpu is the CPU time (user and system) the cluster's processes have used
// so far; 0 when it cannot be read.
func (c *cluster) cpu() time.Duration {
	var total time.Duration
	for _, m := range c.members {
		t, err := testcluster.CPUTime(m.pid)
		if err != nil {
			return 0
		}
		total += t
	}
	return total
}

func execOutput(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).Output()
	return string(out), err
}
