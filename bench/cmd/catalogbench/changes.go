package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"trellis.dev/trellis/internal/testcluster"
)

// changes is what the watchers of one cell report to the loop that
// makes the changes: for the change under way, when each watcher first
// saw it.
type changes struct {
	watchers int
	cur      atomic.Pointer[change]
}

// change is one change: the value that shows it (a watcher compares
// what it read with want) and when each watcher first read it.
type change struct {
	want int
	at   []time.Time
	left atomic.Int64
	done chan struct{}
}

// begin makes want the change under way; call it before the write.
func (cs *changes) begin(want int) *change {
	c := &change{want: want, at: make([]time.Time, cs.watchers), done: make(chan struct{})}
	c.left.Store(int64(cs.watchers))
	cs.cur.Store(c)
	return c
}

// seen is watcher w's report that it read value at t. Only the first
// read of the change's value counts, once per watcher.
func (cs *changes) seen(w int, value int, t time.Time, last **change) {
	c := cs.cur.Load()
	if c == nil || c == *last || value != c.want {
		return
	}
	*last = c
	c.at[w] = t
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// wait returns when every watcher has seen c, the last of them the
// latest time, or fails after limit naming how many had not.
func (c *change) wait(ctx context.Context, limit time.Duration) (time.Time, error) {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		return time.Time{}, fmt.Errorf("%d of %d watchers had not seen a change after %s", c.left.Load(), len(c.at), limit)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	var last time.Time
	for _, at := range c.at {
		if at.After(last) {
			last = at
		}
	}
	return last, nil
}

// lastBy is, for each of n servers, when the last of its watchers saw c
// (watcher w watches server w mod n). Call it after wait.
func (c *change) lastBy(n int) []time.Time {
	last := make([]time.Time, n)
	for w, at := range c.at {
		if at.After(last[w%n]) {
			last[w%n] = at
		}
	}
	return last
}

// watchResult is what a watch cell measured: for each change, from the
// write's sending (and from its acknowledgement) until the last watcher
// had it, the write alone, and from the sending until the last watcher
// of the leader, and of the followers, had it.
type watchResult struct {
	fromSend, fromAck, write []time.Duration
	onLeader, onFollowers    []time.Duration
	watchers, servers        int
	// serverCPU and clientCPU are the CPU time the servers (summed) and
	// this process used over the measured changes, pauses included.
	serverCPU, clientCPU time.Duration
}

// record adds change c, sent at start and acknowledged at ack, whose
// last watcher saw it at last; leader is the index of the server that
// leads.
func (r *watchResult) record(c *change, start, ack, last time.Time, leader int) {
	r.fromSend = append(r.fromSend, last.Sub(start))
	r.fromAck = append(r.fromAck, last.Sub(ack))
	r.write = append(r.write, ack.Sub(start))
	var followers time.Time
	for i, t := range c.lastBy(r.servers) {
		if i == leader {
			r.onLeader = append(r.onLeader, t.Sub(start))
		} else if t.After(followers) {
			followers = t
		}
	}
	r.onFollowers = append(r.onFollowers, followers.Sub(start))
}

// cpuMeter reads the CPU time some processes and this one have used.
type cpuMeter struct {
	pids              []int
	servers0, client0 time.Duration
}

func newCPUMeter(pids []int) *cpuMeter {
	m := &cpuMeter{pids: pids}
	m.servers0, m.client0 = m.read()
	return m
}

func (m *cpuMeter) read() (servers, client time.Duration) {
	for _, pid := range m.pids {
		d, _ := testcluster.CPUTime(pid)
		servers += d
	}
	client, _ = testcluster.CPUTime(os.Getpid())
	return servers, client
}

// since is what the processes and this one used since the meter began.
func (m *cpuMeter) since() (servers, client time.Duration) {
	s, c := m.read()
	return s - m.servers0, c - m.client0
}
