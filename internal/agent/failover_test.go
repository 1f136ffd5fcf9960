package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testcluster"
	"trellis.dev/trellis/internal/testlog"
)

// startRaftCluster runs n real servers in this process as one Raft
// cluster, and waits until they agree on a leader.
func startRaftCluster(t *testing.T, n int) (servers []*testServer, leader int) {
	t.Helper()
	ports, err := testcluster.FreePorts(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i, k int) string { return fmt.Sprintf("127.0.0.1:%d", ports[4*i+k]) }
	var https []*client.Client
	for i := range n {
		var join []string
		for j := range n {
			if j != i {
				join = append(join, addr(j, 3))
			}
		}
		srv, err := server.New(server.Config{
			HTTPAddr: addr(i, 0), GRPCAddr: addr(i, 1), RaftAddr: addr(i, 2), ServerAddr: addr(i, 3),
			Raft:   &server.RaftConfig{DataDir: t.TempDir(), BootstrapExpect: n, RetryJoin: join},
			Logger: testlog.Logger(t).With("server", i), ShutdownTimeout: 10 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		ts := &testServer{srv: srv}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Start(ctx) }()
		var once sync.Once
		ts.stop = func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("server %d: %v", i, err)
				}
			})
		}
		t.Cleanup(ts.stop)
		conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		ts.res = pbresource.NewResourceServiceClient(conn)
		c, err := client.New("http://" + srv.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, ts)
		https = append(https, c)
	}
	ctx := context.Background()
	eventually(t, "the cluster is ready", func() bool {
		for _, c := range https {
			if c.Health(ctx) != nil {
				return false
			}
		}
		return true
	})
	leader = -1
	eventually(t, "a leader is known", func() bool {
		peers, err := https[0].RaftPeers(ctx)
		if err != nil {
			return false
		}
		for _, p := range peers {
			for i := range servers {
				if p.Leader && p.ServerAddr == servers[i].srv.ServerAddr() {
					leader = i
				}
			}
		}
		return leader >= 0
	})
	return servers, leader
}

// The agent uses one server at a time; when it goes away the agent moves
// to another, keeps its session and tasks, and goes on receiving
// assignments (the new server's task stream resumes from what the agent
// holds).
func TestFailoverToAnotherServer(t *testing.T) {
	servers, leader := startRaftCluster(t, 3)
	// A follower first, so that stopping it leaves the cluster its leader,
	// most of the time: a leader on a busy machine may still step down (it
	// missed its lease, 250 ms, while one follower of two was stopping)
	// and another be elected. So nothing below depends on which server
	// leads: writes and reads through any server reach the leader.
	var order []*testServer
	for i, s := range servers {
		if i != leader {
			order = append(order, s)
		}
	}
	order = append(order, servers[leader])
	// The test writes and reads through the server that led when the
	// cluster formed, which it never stops.
	lead := servers[leader]

	pt := newProcTable(t)
	counts := newRPCs()
	cfg := config(t, "i-1", pt, order...)
	cfg.DialOptions = counts.dialOptions()
	a := startAgent(t, cfg)
	registered(t, lead, a)
	eventually(t, "the agent uses the first server", func() bool { return a.Server() == order[0].addr() })
	lead.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	lead.place(t, "default", "t1", "sleeper:1", "i-1")
	lead.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	session := a.Session()

	order[0].stop()
	eventually(t, "the agent moves to another server", func() bool {
		s := a.Server()
		return s != "" && s != order[0].addr()
	})
	// The leaf cache moved with the session: one link, one failover.
	eventually(t, "the leaf cache riding the session's new link", func() bool { return a.leafServers.Riding() })
	lead.place(t, "default", "t2", "sleeper:1", "i-1")
	lead.waitTask(t, "default", "t2", "runs after the failover", lastStatus(orchestrator.StatusRunning))
	if _, tk := lead.task(t, "default", "t1"); tk.GetLastStatus() != orchestrator.StatusRunning || tk.GetSession() != session {
		t.Errorf("t1 after the failover: %s, session %s (was %s)", tk.GetLastStatus(), tk.GetSession(), session)
	}
	if a.Session() != session {
		t.Errorf("the session changed from %s to %s; a failover within the cluster keeps it", session, a.Session())
	}
	if n := pt.starts.Load(); n != 2 {
		t.Errorf("%d tasks started, want 2", n)
	}
	if n := counts.count("WatchTasks"); n != 2 {
		t.Errorf("task watches opened %d times, want 2 (one per server)", n)
	}
	// The new server never served this agent, and still resumes its
	// stream from what the agent holds: no definition again, no whole
	// snapshot.
	if req, start, resumed, ok := counts.taskStreamStart(1); !ok || req.GetResume() == nil || !resumed || slices.Contains(start, "def sleeper-1") {
		t.Errorf("the stream on the next server started with %q (resume sent: %v, resumed: %v); want it resumed, without sleeper-1", start, req.GetResume() != nil, resumed)
	}
	// Heartbeats go on through the remaining servers: the leader takes
	// them, from the agent or forwarded by the follower it uses now. Only
	// a leader's tracker takes heartbeats, and its count never goes down,
	// so the sum over the remaining servers grows by those taken, whichever
	// of them leads.
	remaining := order[1:]
	accepted := func() float64 {
		var n float64
		for _, s := range remaining {
			n += s.acceptedHeartbeats(t)
		}
		return n
	}
	before := accepted()
	eventually(t, "heartbeats reach the leader after the failover", func() bool { return accepted() >= before+2 })
}
