package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
	"trellis.dev/trellis/bench/internal/report"

	"trellis.dev/trellis/internal/testcluster"
)

// agentName is the instance of the task start and agent memory cells.
const agentName = "orchbench-agent"

// runningLimit bounds the wait for one task's RUNNING report: far beyond
// any target, so that only a task that never starts fails the cell.
const runningLimit = 30 * time.Second

// node is one `trellis server` and one `trellis agent`, ready to run
// tasks of orchbench:1, with a watch on the tasks.
type node struct {
	server *server
	agent  *proc
	api    *api
	tasks  *taskWatch
}

// startNode starts the server and the agent, waits for the instance to be
// ready, and registers the task definition.
func (b *bench) startNode(ctx context.Context, ps *procs) (*node, error) {
	servers, leader, err := startTrellis(ctx, ps, b.trellis, 1)
	if err != nil {
		return nil, err
	}
	ag, err := startAgent(ps, b.trellis, agentName, servers)
	if err != nil {
		return nil, err
	}
	a, err := dial(leader.grpcAddr)
	if err != nil {
		return nil, err
	}
	iw, err := watchInstances(ctx, a.res)
	if err != nil {
		a.close()
		return nil, err
	}
	if err := iw.waitReady(ctx, agentName, 1, 60*time.Second); err != nil {
		a.close()
		return nil, fmt.Errorf("agent: %w (log: %s)", err, ag.log)
	}
	if err := a.registerTaskDef(ctx, b.runID); err != nil {
		a.close()
		return nil, err
	}
	tw, err := watchTasks(ctx, a.res, namespace)
	if err != nil {
		a.close()
		return nil, err
	}
	return &node{server: leader, agent: ag, api: a, tasks: tw}, nil
}

// place places the named tasks at once, one goroutine each, and returns
// for each the time from its write's acknowledgement to its RUNNING
// report, plus how long each write took.
func (n *node) place(ctx context.Context, names []string) (lat, writes []time.Duration, waits []*taskWait, err error) {
	lat, writes, _, waits, err = n.placeTimed(ctx, names)
	return lat, writes, waits, err
}

// phases splits one task's start latency by the timestamps of its RUNNING
// report (every process is on this machine, so the clocks agree): from
// the acknowledgement to the agent seeing it run (the agent learns of the
// task and starts it), from there to the report being collected (the
// agent saves its state, then waits for more changes to batch), and from
// there to the report seen on the watch (the write through Raft, and the
// watch).
type phases struct{ start, collect, write []time.Duration }

func (p *phases) add(q phases) {
	p.start, p.collect, p.write = append(p.start, q.start...), append(p.collect, q.collect...), append(p.write, q.write...)
}

func (n *node) placeTimed(ctx context.Context, names []string) (lat, writes []time.Duration, ph phases, waits []*taskWait, err error) {
	waits = make([]*taskWait, len(names))
	for i, name := range names {
		waits[i] = n.tasks.expect(name)
	}
	lat = make([]time.Duration, len(names))
	writes = make([]time.Duration, len(names))
	ph = phases{make([]time.Duration, len(names)), make([]time.Duration, len(names)), make([]time.Duration, len(names))}
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			if err := n.api.placeTask(ctx, name, agentName); err != nil {
				errs[i] = err
				return
			}
			acked := time.Now()
			writes[i] = acked.Sub(t0)
			runAt, err := n.tasks.waitRunning(ctx, name, waits[i], runningLimit)
			if err != nil {
				errs[i] = err
				return
			}
			// The RUNNING report cannot be stored before the task is, but
			// its watch event can in principle arrive before the write's
			// answer: that counts as no wait at all.
			lat[i] = max(runAt.Sub(acked), 0)
			tw := waits[i]
			ph.start[i] = max(tw.startedAt.Sub(acked), 0)
			ph.collect[i] = max(tw.reportedAt.Sub(tw.startedAt), 0)
			ph.write[i] = max(runAt.Sub(tw.reportedAt), 0)
		}()
	}
	wg.Wait()
	return lat, writes, ph, waits, errors.Join(errs...)
}

// startLatencies places count tasks in groups of size: one at a time
// (size 1, waiting for each RUNNING before the next) or in bursts of
// size written at once. After every retireEvery tasks (and every burst)
// it stops and deletes them, so the agent runs at most that many.
func (n *node) startLatencies(ctx context.Context, prefix string, count, size, retireEvery int) (lat, writes []time.Duration, ph phases, err error) {
	var pendingNames []string
	var pendingWaits []*taskWait
	for i := 0; i < count; i += size {
		var names []string
		for j := i; j < min(i+size, count); j++ {
			names = append(names, fmt.Sprintf("%s-%04d", prefix, j))
		}
		l, w, p, waits, err := n.placeTimed(ctx, names)
		pendingNames = append(pendingNames, names...)
		pendingWaits = append(pendingWaits, waits...)
		if err != nil {
			return nil, nil, ph, err
		}
		lat, writes = append(lat, l...), append(writes, w...)
		ph.add(p)
		if len(pendingNames) >= retireEvery {
			if err := retire(ctx, n.api, n.tasks, pendingNames, pendingWaits); err != nil {
				return nil, nil, ph, err
			}
			pendingNames, pendingWaits = nil, nil
		}
	}
	if err := retire(ctx, n.api, n.tasks, pendingNames, pendingWaits); err != nil {
		return nil, nil, ph, err
	}
	return lat, writes, ph, nil
}

// execLatencies is the peer: the same process (sleep, in its own process
// group, output to files, in its own directory) started by os/exec from
// this process, count times in groups of size started at once; the time
// of each is from the first file opened to Start returning, which is when
// the child has exec'd. Processes are ended after every retireEvery.
func execLatencies(dir, runID string, count, size, retireEvery int) ([]time.Duration, error) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		return nil, err
	}
	var lat []time.Duration
	var live []*exec.Cmd
	end := func() {
		for _, c := range live {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			_ = c.Wait()
		}
		live = nil
	}
	defer end()
	env := []string{"PATH=" + os.Getenv("PATH"), taskMark + "=" + runID}
	for i := 0; i < count; i += size {
		k := min(size, count-i)
		got := make([]time.Duration, k)
		cmds := make([]*exec.Cmd, k)
		errs := make([]error, k)
		var wg sync.WaitGroup
		for j := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cdir := filepath.Join(dir, fmt.Sprintf("exec-%d", i+j))
				t0 := time.Now()
				if err := os.MkdirAll(cdir, 0o755); err != nil {
					errs[j] = err
					return
				}
				stdout, err := os.OpenFile(filepath.Join(cdir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					errs[j] = err
					return
				}
				defer stdout.Close()
				stderr, err := os.OpenFile(filepath.Join(cdir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					errs[j] = err
					return
				}
				defer stderr.Close()
				c := &exec.Cmd{Path: sleep, Args: []string{"sleep", taskSleep}, Env: env, Dir: cdir,
					Stdout: stdout, Stderr: stderr, SysProcAttr: &syscall.SysProcAttr{Setpgid: true}}
				if err := c.Start(); err != nil {
					errs[j] = err
					return
				}
				got[j] = time.Since(t0)
				cmds[j] = c
			}()
		}
		wg.Wait()
		for _, c := range cmds {
			if c != nil {
				live = append(live, c)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		lat = append(lat, got...)
		if len(live) >= retireEvery {
			end()
		}
	}
	return lat, nil
}

// startMode is one way of placing tasks, measured on Trellis and on the
// os/exec peer.
type startMode struct {
	label       string
	lat, writes []time.Duration
	phases      phases
	exec        []time.Duration
	// agentCPU and serverCPU are the CPU time (user+system) the agent and
	// the server spent per task, start and stop: a figure other load on
	// the machine barely moves, unlike the latencies.
	agentCPU, serverCPU time.Duration
}

// startResult is the task start cell's figures.
type startResult struct {
	modes []*startMode
	load  [2]string
}

// taskStart runs the task start latency cell.
func (b *bench) taskStart(ctx context.Context) (*startResult, error) {
	ps := newProcs(b.cellDir("start"), b.runID)
	defer ps.cleanup()
	r := &startResult{}
	r.load[0] = testcluster.LoadAvg()
	n, err := b.startNode(ctx, ps)
	if err != nil {
		return nil, err
	}
	defer n.api.close()
	// A few tasks first, not counted: the first start of anything pays
	// for page faults and connection set-up.
	if _, _, _, err := n.startLatencies(ctx, "warm", 5, 1, 5); err != nil {
		return nil, fmt.Errorf("warm-up: %w (agent log: %s)", err, n.agent.log)
	}
	dir := b.cellDir("exec")
	if _, err := execLatencies(dir, b.runID, 5, 1, 5); err != nil {
		return nil, fmt.Errorf("os/exec: %w", err)
	}
	for _, m := range []struct {
		label, prefix string
		size          int
	}{{"one at a time", "seq", 1}, {fmt.Sprintf("bursts of %d", b.burst), "burst", b.burst}} {
		mode := &startMode{label: m.label}
		a0, err1 := testcluster.CPUTime(n.agent.pid())
		s0, err2 := testcluster.CPUTime(n.server.pid())
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if mode.lat, mode.writes, mode.phases, err = n.startLatencies(ctx, m.prefix, b.tasks, m.size, b.burst); err != nil {
			return nil, fmt.Errorf("%s: %w (agent log: %s)", m.label, err, n.agent.log)
		}
		a1, err1 := testcluster.CPUTime(n.agent.pid())
		s1, err2 := testcluster.CPUTime(n.server.pid())
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		mode.agentCPU = (a1 - a0) / time.Duration(max(b.tasks, 1))
		mode.serverCPU = (s1 - s0) / time.Duration(max(b.tasks, 1))
		if mode.exec, err = execLatencies(dir, b.runID, b.tasks, m.size, b.burst); err != nil {
			return nil, fmt.Errorf("os/exec: %w", err)
		}
		fmt.Fprintf(b.progress, "start: %s: p50 %s\n", m.label, report.Round(summarize(mode.lat).p50))
		r.modes = append(r.modes, mode)
	}
	r.load[1] = testcluster.LoadAvg()
	return r, nil
}
