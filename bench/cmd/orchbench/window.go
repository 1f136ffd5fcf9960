package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"trellis.dev/trellis/bench/internal/machine"
	"trellis.dev/trellis/internal/testcluster"
)

// rssSample is how often resident sizes are read during a window.
const rssSample = 5 * time.Second

// watched is one process measured over a window.
type watched struct {
	label string
	role  string
	pid   int
}

// usage is what a window measured of one process.
type usage struct {
	watched
	cores       float64 // CPU time over wall time
	rss, rssMax int64   // at the end, and the highest sample
}

// window is what a measurement window measured.
type window struct {
	procs   []usage
	elapsed time.Duration
	// busy is the whole machine's CPU use (cores) over the window, and
	// others what of it was not the measured processes': other work on
	// the machine, which competes with the measured processes.
	busy, others float64
	load         [2]string
}

// measureWindow reads each process's CPU time at the start and end of d
// (utime+stime from /proc/PID/stat), and its resident size every few
// seconds.
func measureWindow(ctx context.Context, d time.Duration, ps []watched) (*window, error) {
	w := &window{load: [2]string{testcluster.LoadAvg(), ""}}
	start := make([]time.Duration, len(ps))
	for i, p := range ps {
		t, err := testcluster.CPUTime(p.pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.label, err)
		}
		start[i] = t
		w.procs = append(w.procs, usage{watched: p})
	}
	busy0, err := machine.BusyTime()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	end := t0.Add(d)
	tick := time.NewTicker(rssSample)
	defer tick.Stop()
	for {
		for i := range w.procs {
			u := &w.procs[i]
			rss, _, err := memStatus(u.pid)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", u.label, err)
			}
			u.rss, u.rssMax = rss, max(u.rssMax, rss)
		}
		if !time.Now().Before(end) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		case <-time.After(time.Until(end)):
		}
	}
	w.elapsed = time.Since(t0)
	busy1, err := machine.BusyTime()
	if err != nil {
		return nil, err
	}
	var ours float64
	for i := range w.procs {
		u := &w.procs[i]
		t, err := testcluster.CPUTime(u.pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", u.label, err)
		}
		u.cores = (t - start[i]).Seconds() / w.elapsed.Seconds()
		ours += u.cores
	}
	w.busy = (busy1 - busy0).Seconds() / w.elapsed.Seconds()
	w.others = max(w.busy-ours, 0)
	w.load[1] = testcluster.LoadAvg()
	return w, nil
}

// serversWatched is the servers of one cluster, each labelled kind and
// its index, in the role it has: leader or follower.
func serversWatched(kind string, servers []*server, leader *server) []watched {
	var ws []watched
	for i, s := range servers {
		role := "follower"
		if s == leader {
			role = "leader"
		}
		ws = append(ws, watched{label: fmt.Sprintf("%s %d", kind, i), role: role, pid: s.pid()})
	}
	return ws
}

// self is this process, measured as the etcd peer's client.
func self(label string) watched { return watched{label: label, role: "client", pid: os.Getpid()} }

// pause waits d, a measurement pause rather than a wait for a condition,
// unless ctx ends first.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
