// Command orchbench measures the orchestrator on this machine, each figure
// beside a real peer measured in the same run, and prints a Markdown
// report:
//
//   - start: task start latency with the exec driver, from the Task
//     write's acknowledgement to the RUNNING report seen on a watch, one
//     `trellis server` and one `trellis agent` running sleep; beside the
//     same process started by os/exec from this benchmark.
//   - fleet: `trellis sim -instances N` heartbeating against 3 `trellis
//     server` processes: each server's CPU and resident size at steady
//     state, then the time to mark a killed instance down; beside etcd
//     (3 members) keeping N leases alive, and the time it takes to expire
//     one whose keepalive stopped.
//   - rss: the agent's resident size with 50 tasks running, beside its
//     size with none.
//   - daemon: the daemon scheduler on 3 servers and `trellis sim
//     -instances N`: fresh deployments to N/5 and N instances, a rolling
//     update, leader CPU with three active environments, and the time
//     from an instance joining, or a task dying, to its task RUNNING;
//     beside etcd doing the store work of the same deployments.
//
// Every process it starts is ended when it finishes, fails or is
// interrupted; they also die with it if it is killed.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"trellis.dev/trellis/bench/internal/etcdpeer"
	"trellis.dev/trellis/bench/internal/harness"
)

type bench struct {
	trellis, etcd string
	dir           string
	runID         string
	out, progress io.Writer

	tasks, burst, rssTasks int
	instances, dead        int
	window, settle         time.Duration

	daemonInstances, daemonBatch, joins int
	daemonWindow, minHealthy            time.Duration
	profile                             bool
	phaseMetrics                        bool
}

func (b *bench) cellDir(name string) string {
	d := filepath.Join(b.dir, name)
	_ = os.MkdirAll(d, 0o755)
	return d
}

var allCells = []string{"start", "fleet", "rss", "daemon"}

func main() { os.Exit(run()) }

func run() int {
	b := &bench{}
	flag.StringVar(&b.trellis, "trellis", "bin/trellis", "the trellis binary to measure")
	flag.StringVar(&b.etcd, "etcd", "etcd", "the etcd binary to compare with")
	cells := flag.String("cells", strings.Join(allCells, ","), "comma-separated cells to run: start, fleet, rss, daemon")
	flag.IntVar(&b.tasks, "tasks", 200, "start: tasks placed one at a time, and again in bursts")
	flag.IntVar(&b.burst, "burst", 20, "start: tasks per burst (also how many run at most before they are stopped)")
	flag.IntVar(&b.rssTasks, "rss-tasks", 50, "rss: tasks the agent runs")
	flag.IntVar(&b.instances, "instances", 5000, "fleet: simulated instances (etcd: leases)")
	flag.IntVar(&b.dead, "dead", 5, "fleet: dead instances detected, one after another")
	flag.DurationVar(&b.window, "window", 60*time.Second, "fleet: how long CPU use is measured")
	flag.DurationVar(&b.settle, "settle", 15*time.Second, "fleet: pause after every instance is registered, before measuring")
	flag.IntVar(&b.daemonInstances, "daemon-instances", 5000, "daemon: simulated instances (the small deployment is a fifth of them)")
	flag.IntVar(&b.daemonBatch, "daemon-batch", 1000, "daemon: etcd peer's creates per transaction (the scheduler's batch of task writes)")
	flag.IntVar(&b.joins, "joins", 50, "daemon: instances that join, and tasks that die, one sample each")
	flag.DurationVar(&b.daemonWindow, "daemon-window", 20*time.Second, "daemon: how long the leader's CPU use is measured")
	flag.DurationVar(&b.minHealthy, "min-healthy-time", time.Second, "daemon: min_healthy_time of the rolling update")
	flag.BoolVar(&b.profile, "profile", false, "daemon: fetch the leader's CPU profiles (15 s of the fresh deployment to all instances, and the window at rest) into the kept working directory")
	flag.BoolVar(&b.phaseMetrics, "phase-metrics", false, "daemon: print, for each deployment, the server counters that grew while it ran (summed over the servers)")
	outPath := flag.String("out", "", "also write the report to this file")
	keep := flag.Bool("keep", false, "keep the working directory (data dirs and logs) even when every cell succeeds")
	flag.Parse()

	want, err := harness.Cells(*cells, allCells)
	if err != nil {
		log.Print(err)
		return 2
	}
	if b.trellis, err = harness.Binary(b.trellis); err != nil {
		log.Print(err)
		return 2
	}
	if b.daemonInstances%daemonZones != 0 || b.daemonInstances < daemonZones {
		log.Printf("-daemon-instances: %d is not a positive multiple of %d", b.daemonInstances, daemonZones)
		return 2
	}
	if want["fleet"] || want["daemon"] {
		if _, err := exec.LookPath(b.etcd); err != nil {
			log.Printf("-etcd: %v", err)
			return 2
		}
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	b.runID = hex.EncodeToString(id)
	h, err := harness.Start("orchbench", *outPath)
	if err != nil {
		log.Print(err)
		return 1
	}
	b.dir, b.out, b.progress = h.Dir, h.Out, os.Stderr

	failed := false
	defer func() {
		// Every cell ends its own processes; this catches any task
		// process a failure left behind.
		killMarked(b.runID)
		h.End(failed || *keep || b.profile, "data dirs and logs")
	}()
	fail := func(cell string, err error) {
		failed = true
		fmt.Fprintf(b.out, "**%s: failed: %v**\n\n", cell, err)
	}

	h.Header(b.trellis, fmt.Sprintf("; etcd `%s` (%s)", b.etcd, etcdpeer.Version(b.etcd)))
	if want["start"] {
		fmt.Fprintln(b.progress, "orchbench: task start latency")
		r, err := b.taskStart(ctx)
		if err != nil {
			fail("task start latency", err)
		} else {
			b.reportStart(r)
		}
	}
	if want["fleet"] && ctx.Err() == nil {
		fmt.Fprintln(b.progress, "orchbench: fleet, Trellis")
		tr, err := b.trellisFleet(ctx)
		if err != nil {
			fail("fleet (Trellis)", err)
		}
		var er *fleetResult
		if tr != nil && ctx.Err() == nil {
			fmt.Fprintln(b.progress, "orchbench: fleet, etcd")
			if er, err = b.etcdFleet(ctx); err != nil {
				fail("fleet (etcd)", err)
			}
		}
		if tr != nil && er != nil {
			b.reportFleet(tr, er)
		}
	}
	if want["rss"] && ctx.Err() == nil {
		fmt.Fprintln(b.progress, "orchbench: agent memory")
		r, err := b.agentRSS(ctx)
		if err != nil {
			fail("agent memory", err)
		} else {
			b.reportRSS(r)
		}
	}
	if want["daemon"] && ctx.Err() == nil {
		fmt.Fprintln(b.progress, "orchbench: daemon scheduler, Trellis")
		tr, err := b.trellisDaemon(ctx)
		if err != nil {
			fail("daemon scheduler (Trellis)", err)
		}
		if tr != nil && ctx.Err() == nil {
			fmt.Fprintln(b.progress, "orchbench: daemon scheduler, etcd")
			er, err := b.etcdDaemon(ctx, []int{b.daemonInstances / daemonZones, b.daemonInstances})
			if err != nil {
				fail("daemon scheduler (etcd)", err)
			}
			b.reportDaemon(tr, er)
		}
	}
	if ctx.Err() != nil {
		fail("orchbench", ctx.Err())
	}
	if failed {
		return 1
	}
	return 0
}
