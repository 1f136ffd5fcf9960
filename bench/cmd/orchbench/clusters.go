package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"trellis.dev/trellis/bench/internal/etcdpeer"
	"trellis.dev/trellis/internal/testcluster"
)

// server is one `trellis server` or etcd member.
type server struct {
	*proc
	httpAddr string // trellis only
	grpcAddr string // trellis: gRPC API; etcd: client URL host:port
	raftAddr string // trellis only
	peerAddr string // trellis only: the server-to-server port, which -retry-join names
}

// startTrellis starts n `trellis server` processes forming one cluster
// (-bootstrap-expect n, each -retry-join the others), with the debug
// endpoints on so that a missed target can be profiled, and waits for an
// agreed leader, which it returns with the servers.
func startTrellis(ctx context.Context, ps *procs, bin string, n int) ([]*server, *server, error) {
	ports, err := testcluster.FreePorts(4 * n)
	if err != nil {
		return nil, nil, err
	}
	var servers []*server
	for i := range n {
		servers = append(servers, &server{
			httpAddr: "127.0.0.1:" + strconv.Itoa(ports[4*i]),
			grpcAddr: "127.0.0.1:" + strconv.Itoa(ports[4*i+1]),
			raftAddr: "127.0.0.1:" + strconv.Itoa(ports[4*i+2]),
			peerAddr: "127.0.0.1:" + strconv.Itoa(ports[4*i+3]),
		})
	}
	for i, s := range servers {
		args := []string{"server",
			"-data-dir", filepath.Join(ps.dir, fmt.Sprintf("server%d", i)),
			"-http-addr", s.httpAddr, "-grpc-addr", s.grpcAddr, "-raft-addr", s.raftAddr, "-server-addr", s.peerAddr,
			"-bootstrap-expect", strconv.Itoa(n),
			"-dns-addr", "", // three servers on one machine: the default port once
			"-enable-debug", "-log-level", "warn",
			// Three servers and 5,000 agents saturate this machine's 2
			// cores: the busy, shared machine docs/cluster.md raises the
			// multiplier for. 10 gives the 5 s Raft timings the figures
			// of record were measured with.
			"-raft-multiplier", "10",
		}
		for j, o := range servers {
			if j != i {
				args = append(args, "-retry-join", o.peerAddr)
			}
		}
		p, err := ps.start(fmt.Sprintf("server%d", i), bin, args...)
		if err != nil {
			return nil, nil, err
		}
		s.proc = p
	}
	leader, err := trellisLeader(ctx, servers)
	if err != nil {
		return nil, nil, err
	}
	return servers, leader, nil
}

// trellisLeader waits until every server names the same leader, one of
// them, and returns it.
func trellisLeader(ctx context.Context, servers []*server) (*server, error) {
	client := http.Client{Timeout: 2 * time.Second}
	var leader *server
	err := testcluster.WaitFor(ctx, 60*time.Second, func() bool {
		var addr string
		for _, s := range servers {
			resp, err := client.Get("http://" + s.httpAddr + "/v1/status/leader")
			if err != nil {
				return false
			}
			var l string
			err = json.NewDecoder(resp.Body).Decode(&l)
			resp.Body.Close()
			if err != nil || l == "" || (addr != "" && l != addr) {
				return false
			}
			addr = l
		}
		for _, s := range servers {
			if s.raftAddr == addr {
				leader = s
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("trellis: no agreed leader among %d servers: %w (logs in %s)", len(servers), err, filepath.Dir(servers[0].log))
	}
	return leader, nil
}

// startAgent starts `trellis agent` named name against the servers.
func startAgent(ps *procs, bin, name string, servers []*server) (*proc, error) {
	args := []string{"agent", "-name", name,
		"-data-dir", filepath.Join(ps.dir, name),
		"-http-addr", "127.0.0.1:0", "-dns-addr", "", "-log-level", "warn"}
	for _, s := range servers {
		args = append(args, "-server", s.grpcAddr)
	}
	return ps.start(name, bin, args...)
}

// startSim starts `trellis sim` with n instances named prefix1..prefixN,
// as the process called label, with extra flags of `trellis sim`.
//
// The agents' state (each task's record, written on every change) goes
// to a tmpfs where the machine has one, as `trellis sim` does by default:
// here thousands of agents share one disk, where on a fleet each has its
// own. On this machine's ext4, replacing those files one after another
// made each wait for the others' data to reach the disk, which added
// about 100 ms per batch to the rolling update.
func startSim(ps *procs, bin, label, prefix string, n int, servers []*server, extra ...string) (*proc, error) {
	dir, err := ps.scratchDir(label)
	if err != nil {
		return nil, err
	}
	args := []string{"sim", "-instances", strconv.Itoa(n), "-name-prefix", prefix,
		"-data-dir", dir, "-log-level", "warn"}
	args = append(args, extra...)
	for _, s := range servers {
		args = append(args, "-server", s.grpcAddr)
	}
	return ps.start(label, bin, args...)
}

// startEtcd starts an n-member etcd cluster with its defaults (fsync on
// every commit) and any extra flags, and waits until every member reports itself healthy.
func startEtcd(ctx context.Context, ps *procs, bin string, n int, extra ...string) ([]*server, error) {
	layout, err := etcdpeer.Layout(n)
	if err != nil {
		return nil, err
	}
	var members []*server
	for i, m := range layout {
		args := etcdpeer.Args(layout, i, filepath.Join(ps.dir, fmt.Sprintf("etcd%d", i)), "orchbench")
		p, err := ps.start(fmt.Sprintf("etcd%d", i), bin, append(args, extra...)...)
		if err != nil {
			return nil, err
		}
		members = append(members, &server{proc: p, grpcAddr: m.ClientAddr})
	}
	if err := etcdpeer.WaitHealthy(ctx, layout); err != nil {
		return nil, fmt.Errorf("etcd cluster of %d did not become healthy: %w (logs in %s)", n, err, ps.dir)
	}
	return members, nil
}

// etcdLeader returns the member that leads.
// dialEtcd opens one client per member; closeEtcd closes them.
func dialEtcd(members []*server) ([]*clientv3.Client, error) {
	var clis []*clientv3.Client
	for _, m := range members {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + m.grpcAddr}, DialTimeout: 5 * time.Second})
		if err != nil {
			closeEtcd(clis)
			return nil, err
		}
		clis = append(clis, c)
	}
	return clis, nil
}

func closeEtcd(clis []*clientv3.Client) {
	for _, c := range clis {
		c.Close()
	}
}

func etcdLeader(ctx context.Context, cli *clientv3.Client, members []*server) (*server, error) {
	for _, m := range members {
		st, err := cli.Status(ctx, "http://"+m.grpcAddr)
		if err != nil {
			return nil, err
		}
		if st.Leader == st.Header.GetMemberId() {
			return m, nil
		}
	}
	return nil, fmt.Errorf("etcd: no member says it leads")
}
