package agent

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/orchestrator"
)

// cutter dials the servers for an agent, and can cut the agent off: it
// closes every connection it made and refuses new ones until restored.
// The server and its store live on meanwhile.
type cutter struct {
	mu    sync.Mutex
	down  bool
	conns []net.Conn
}

var errCut = errors.New("cut off by the test")

func (c *cutter) dialOption() grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c.mu.Lock()
		down := c.down
		c.mu.Unlock()
		if down {
			return nil, errCut
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.down {
			conn.Close()
			return nil, errCut
		}
		c.conns = append(c.conns, conn)
		return conn, nil
	})
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = true
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

func (c *cutter) restore() {
	c.mu.Lock()
	c.down = false
	c.mu.Unlock()
}

// An agent cut off from its server takes in what changed meanwhile once
// it is back: its new task stream resumes from what it holds, with the
// deletion of the task deleted while it was away (the agent stops it) and
// the one placed meanwhile (the agent starts it).
// The agent keeps its session and its other state throughout.
func TestReconnectedAgentTakesInWhatChangedMeanwhile(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	counts := newRPCs()
	var link cutter
	cfg := config(t, "i-1", pt, srv)
	cfg.DialOptions = append(counts.dialOptions(), link.dialOption())
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	tk := srv.waitTask(t, "default", "t1", "runs", lastStatus(orchestrator.StatusRunning))
	pid, _ := strconv.Atoi(tk.GetContainers()[0].GetRuntimeId())
	session := a.Session()

	link.cut()
	eventually(t, "the agent notices", func() bool { return a.Server() == "" })
	if _, err := srv.res.Delete(context.Background(), &pbresource.DeleteRequest{Id: orchestrator.TaskID("default", "t1")}); err != nil {
		t.Fatal(err)
	}
	srv.place(t, "default", "t2", "sleeper:1", "i-1")
	watches := counts.count("WatchTasks")
	link.restore()

	eventually(t, "the deleted task is stopped", func() bool {
		select {
		case <-pt.find(pid).done:
			return true
		default:
			return false
		}
	})
	srv.waitTask(t, "default", "t2", "runs after the agent is back", lastStatus(orchestrator.StatusRunning))
	if res, _ := srv.task(t, "default", "t1"); res != nil {
		t.Errorf("the deleted task was written again: %v", res)
	}
	if n := counts.count("WatchTasks") - watches; n < 1 {
		t.Errorf("no task stream was opened after the agent was back")
	}
	if n := counts.count("WatchList " + ids.TypeString(orchestrator.TaskType)); n != 0 {
		t.Errorf("WatchList of the tasks opened %d times; want the per-instance task stream only", n)
	}
	if a.Session() != session {
		t.Errorf("the session changed from %s to %s; a lost connection keeps it", session, a.Session())
	}
	if n := pt.starts.Load(); n != 2 {
		t.Errorf("%d tasks started, want 2", n)
	}
}

// An agent that lost its stream resumes it from what it holds: its new
// task stream names every task it holds at the version it holds (and the
// view index, as min_index), and the server sends only the task placed
// meanwhile, no definition the agent has, and an END_OF_SNAPSHOT marked
// resumed. The tasks it ran go on running: none is started again.
func TestReconnectedAgentResumesItsTaskStream(t *testing.T) {
	srv := startServer(t)
	pt := newProcTable(t)
	counts := newRPCs()
	var link cutter
	cfg := config(t, "i-1", pt, srv)
	cfg.DialOptions = append(counts.dialOptions(), link.dialOption())
	a := startAgent(t, cfg)
	registered(t, srv, a)
	srv.registerDefinition(t, "default", shDefinition("sleeper", "exec sleep 1000"))
	srv.place(t, "default", "t1", "sleeper:1", "i-1")
	srv.place(t, "default", "t2", "sleeper:1", "i-1")
	var pids []int
	for _, name := range []string{"t1", "t2"} {
		tk := srv.waitTask(t, "default", name, "runs", lastStatus(orchestrator.StatusRunning))
		pid, _ := strconv.Atoi(tk.GetContainers()[0].GetRuntimeId())
		pids = append(pids, pid)
	}
	// What the store has now, reports included, is what the agent holds.
	want := map[string]string{}
	for _, name := range []string{"t1", "t2"} {
		res, _ := srv.task(t, "default", name)
		want[name] = res.GetId().GetUid() + "@" + res.GetVersion()
	}
	// The agent takes its own reports' replies in a moment after the
	// store has them: cut the link only once it holds what is stored.
	heldNow := func() map[string]string {
		got := map[string]string{}
		for _, h := range a.session.Resume().GetTasks() {
			got[h.GetId().GetName()] = h.GetId().GetUid() + "@" + h.GetVersion()
		}
		return got
	}
	eventually(t, "the agent holds what the store has", func() bool { return maps.Equal(heldNow(), want) })
	streams := counts.taskStreams()

	link.cut()
	eventually(t, "the agent notices", func() bool { return a.Server() == "" })
	srv.place(t, "default", "t3", "sleeper:1", "i-1")
	link.restore()
	srv.waitTask(t, "default", "t3", "runs after the agent is back", lastStatus(orchestrator.StatusRunning))

	var (
		req     *pbagent.WatchTasksRequest
		start   []string
		resumed bool
	)
	eventually(t, "the new stream has started", func() bool {
		var ok bool
		req, start, resumed, ok = counts.taskStreamStart(streams)
		return ok
	})
	held := map[string]string{}
	for _, h := range req.GetResume().GetTasks() {
		held[h.GetId().GetName()] = h.GetId().GetUid() + "@" + h.GetVersion()
	}
	if req.GetResume() == nil || !maps.Equal(held, want) {
		t.Fatalf("the agent resumed from %v; want the tasks it holds, %v", held, want)
	}
	if req.GetMinIndex() == 0 {
		t.Errorf("the resumed stream asked for min_index 0; want the index of the view the agent holds")
	}
	if defs := req.GetResume().GetDefinitions(); len(defs) != 1 || defs[0].GetName() != "sleeper-1" {
		t.Errorf("the agent said it holds the definitions %v; want sleeper-1", defs)
	}
	if !resumed || !slices.Equal(start, []string{"upsert t3"}) {
		t.Fatalf("the stream started with %q (resumed: %v); want only t3, resumed", start, resumed)
	}
	if got := srv.metric(t, "trellis_watch_tasks_streams_total", "start", "resumed"); got < 1 {
		t.Errorf("the server counted %v resumed task streams", got)
	}
	if got := srv.metric(t, "trellis_watch_tasks_events_saved_total", "", ""); got < 3 {
		t.Errorf("the server counted %v events saved; want t1, t2 and sleeper-1 at least", got)
	}
	for _, pid := range pids {
		select {
		case <-pt.find(pid).done:
			t.Errorf("process %d ended across the reconnect", pid)
		default:
		}
	}
	if n := pt.starts.Load(); n != 3 {
		t.Errorf("%d tasks started, want 3 (t1 and t2 once, t3)", n)
	}
}

// WaitConnected returns once the agent is registered and heard (what
// trellis dev waits for before its banner), and waits again while the
// agent is cut off from its server, until ctx ends.
func TestWaitConnectedFollowsTheConnection(t *testing.T) {
	srv := startServer(t)
	var link cutter
	cfg := config(t, "i-1", newProcTable(t), srv)
	cfg.DialOptions = append(cfg.DialOptions, link.dialOption())
	a := startAgent(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatalf("WaitConnected: %v", err)
	}
	if _, in := srv.instance(t, "i-1"); in.GetSession() != a.Session() {
		t.Fatalf("WaitConnected returned before the instance was registered: %v", in)
	}

	link.cut()
	eventually(t, "the agent notices", func() bool { return a.Server() == "" })
	gone, stop := context.WithCancel(context.Background())
	stop()
	if err := a.WaitConnected(gone); err == nil {
		t.Fatal("WaitConnected answered nil while the agent had no server")
	}
	link.restore()
	if err := a.WaitConnected(ctx); err != nil {
		t.Fatalf("WaitConnected after the link is back: %v", err)
	}
}
