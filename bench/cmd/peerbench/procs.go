package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"trellis.dev/trellis/bench/internal/etcdpeer"
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
	layout, err := etcdpeer.Layout(n)
	if err != nil {
		return nil, err
	}
	var procs []*exec.Cmd
	c := &cluster{stop: func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}}
	for i, m := range layout {
		logf, err := os.Create(filepath.Join(sub, fmt.Sprintf("etcd%d.log", i)))
		if err != nil {
			c.stop()
			return nil, err
		}
		cmd := exec.Command(bin, etcdpeer.Args(layout, i, filepath.Join(sub, fmt.Sprintf("etcd%d", i)), "peerbench")...)
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			c.stop()
			return nil, fmt.Errorf("start etcd: %w", err)
		}
		procs = append(procs, cmd)
		pid := cmd.Process.Pid
		c.members = append(c.members, &member{
			grpcAddr: m.ClientAddr,
			rss:      func() (int64, error) { return pidRSS(pid) },
			pid:      pid,
		})
	}
	if err := etcdpeer.WaitHealthy(ctx, layout); err != nil {
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
