package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// fleetResult is what the fleet cell measured of one system.
type fleetResult struct {
	register time.Duration // until every instance (lease) was registered
	win      *window
	// downsDuring: instances marked down during the window (Trellis;
	// expected 0).
	downsDuring int
	// beatsPerSec: heartbeats the leader took per second over the window
	// (Trellis), or keepalives acknowledged per second (etcd).
	beatsPerSec float64
	leaderNote  string
	detect      []time.Duration
}

// deadPhase picks when, after a dead instance's first heartbeat, its
// process is killed: a random point in a heartbeat interval after a few
// heartbeats, so that the detections sample where in the interval a real
// failure falls (the last heartbeat 0 to TTL/3 before the kill).
func deadPhase() time.Duration {
	return 4*time.Second + time.Duration(rand.Int64N(int64(4*time.Second)))
}

// trellisFleet runs the fleet cell on Trellis: 3 servers, `trellis sim
// -instances N`, steady-state usage, then dead instance detection.
func (b *bench) trellisFleet(ctx context.Context) (*fleetResult, error) {
	ps := newProcs(b.cellDir("fleet-trellis"), b.runID)
	defer ps.cleanup()
	servers, leader, err := startTrellis(ctx, ps, b.trellis, 3)
	if err != nil {
		return nil, err
	}
	a, err := dial(leader.grpcAddr)
	if err != nil {
		return nil, err
	}
	defer a.close()
	iw, err := watchInstances(ctx, a.res)
	if err != nil {
		return nil, err
	}
	r := &fleetResult{}
	t0 := time.Now()
	sim, err := startSim(ps, b.trellis, "sim", "sim-", b.instances, servers)
	if err != nil {
		return nil, err
	}
	if err := iw.waitReady(ctx, "sim-", b.instances, 10*time.Minute); err != nil {
		return nil, fmt.Errorf("sim: %w (log: %s)", err, sim.log)
	}
	r.register = time.Since(t0)
	fmt.Fprintf(b.progress, "trellis: %d instances ready in %s; settling %s\n", b.instances, r.register.Round(time.Millisecond), b.settle)
	if err := pause(ctx, b.settle); err != nil {
		return nil, err
	}

	if leader, err = trellisLeader(ctx, servers); err != nil {
		return nil, err
	}
	ws := append(serversWatched("trellis server", servers, leader), watched{label: fmt.Sprintf("trellis sim (%d agents)", b.instances), role: "client", pid: sim.pid()})
	downs0 := iw.downCount()
	beats0, err := heartbeatsOK(leader.httpAddr)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.progress, "trellis: measuring %s\n", b.window)
	if r.win, err = measureWindow(ctx, b.window, ws); err != nil {
		return nil, err
	}
	beats1, err := heartbeatsOK(leader.httpAddr)
	if err != nil {
		return nil, err
	}
	r.beatsPerSec = (beats1 - beats0) / r.win.elapsed.Seconds()
	r.downsDuring = iw.downCount() - downs0
	if now, err := trellisLeader(ctx, servers); err != nil || now != leader {
		r.leaderNote = "the leader changed during the window"
	}

	for k := 1; k <= b.dead; k++ {
		prefix := fmt.Sprintf("dead%d-", k)
		p, err := startSim(ps, b.trellis, fmt.Sprintf("dead%d", k), prefix, 1, servers)
		if err != nil {
			return nil, err
		}
		if err := iw.waitReady(ctx, prefix, 1, time.Minute); err != nil {
			return nil, fmt.Errorf("dead instance %d: %w (log: %s)", k, err, p.log)
		}
		if err := pause(ctx, deadPhase()); err != nil {
			return nil, err
		}
		killed := time.Now()
		p.kill()
		downAt, err := iw.waitDown(ctx, prefix+"1", 2*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("dead instance %d never went down: %w", k, err)
		}
		r.detect = append(r.detect, downAt.Sub(killed))
		fmt.Fprintf(b.progress, "trellis: dead instance %d down %s after the kill\n", k, downAt.Sub(killed).Round(time.Millisecond))
	}
	return r, nil
}

// heartbeatsOK reads trellis_heartbeat_requests_total{result="ok"} from a
// server's metrics: the heartbeats it took as the leader.
func heartbeatsOK(httpAddr string) (float64, error) {
	resp, err := http.Get("http://" + httpAddr + "/v1/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, `trellis_heartbeat_requests_total{result="ok"} `); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, nil
}
