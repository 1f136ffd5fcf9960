// Command failoverbench measures how long a Trellis cluster is without a
// leader when its leader dies, and what that costs the work running on
// it, and prints a Markdown report:
//
//   - writes: 3 `trellis server` processes under a write load through
//     all of them; the leader is killed with SIGKILL, and the time from
//     the kill to the first acknowledged write of those sent after it
//     (which only a new leader can have committed) is measured; then the
//     killed server is restarted from its data directory, and again, -kills
//     times: p50 and max. The whole history of writes, with strong reads
//     of every key at the end, must be linearizable (no acknowledged
//     write lost), or the run fails.
//   - daemon: 3 servers, a simulated fleet and two daemon environments;
//     rolling deployments of both, during each of which the leader is
//     killed: the time from the kill until both deployments completed and
//     both environments are whole again, beside the same deployments
//     with no kill.
//
// Every process it starts is ended when it finishes or fails.
//
//	go run ./cmd/failoverbench -trellis ../bin/trellis
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"trellis.dev/trellis/bench/internal/harness"
)

type bench struct {
	trellis     string
	dir         string
	serverFlags []string
	out         io.Writer
	progress    io.Writer

	kills, writers, settleWrites int

	instances, deploys int
	minHealthy         time.Duration
}

func (b *bench) cellDir(name string) string {
	d := filepath.Join(b.dir, name)
	_ = os.MkdirAll(d, 0o755)
	return d
}

var allCells = []string{"writes", "daemon"}

func main() { os.Exit(run()) }

func run() int {
	b := &bench{}
	flag.StringVar(&b.trellis, "trellis", "bin/trellis", "the trellis binary to measure")
	cells := flag.String("cells", strings.Join(allCells, ","), "comma-separated cells to run: writes, daemon")
	serverFlags := flag.String("server-flags", "", "extra flags for every `trellis server`, space-separated (for instance \"-raft-multiplier 5\")")
	flag.IntVar(&b.kills, "kills", 10, "writes: leader kills")
	flag.IntVar(&b.writers, "writers", 6, "writes: concurrent writers, spread over the servers")
	flag.IntVar(&b.settleWrites, "settle-writes", 300, "writes: acknowledged writes to wait for before each kill (and after each restart)")
	flag.IntVar(&b.instances, "instances", 200, "daemon: simulated instances (each environment takes half)")
	flag.IntVar(&b.deploys, "deploys", 4, "daemon: rolling deployments with a leader kill (and as many without)")
	flag.DurationVar(&b.minHealthy, "min-healthy-time", time.Second, "daemon: min_healthy_time of the rolling deployments")
	outPath := flag.String("out", "", "also write the report to this file")
	keep := flag.Bool("keep", false, "keep the working directory (data dirs and logs) even when every cell succeeds")
	flag.Parse()

	want, err := harness.Cells(*cells, allCells)
	if err != nil {
		log.Print(err)
		return 2
	}
	if b.kills < 1 || b.writers < 1 || b.deploys < 1 {
		log.Printf("-kills, -writers and -deploys must be at least 1")
		return 2
	}
	if b.instances < 2 || b.instances%2 != 0 {
		log.Printf("-instances: %d is not a positive even number", b.instances)
		return 2
	}
	b.serverFlags = strings.Fields(*serverFlags)
	if b.trellis, err = harness.Binary(b.trellis); err != nil {
		log.Print(err)
		return 2
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	h, err := harness.Start("failoverbench", *outPath)
	if err != nil {
		log.Print(err)
		return 1
	}
	b.dir, b.out, b.progress = h.Dir, h.Out, os.Stderr
	failed := false
	defer func() { h.End(failed || *keep, "data dirs and logs") }()
	fail := func(cell string, err error) {
		failed = true
		fmt.Fprintf(b.out, "**%s: failed: %v**\n\n", cell, err)
	}

	h.Header(b.trellis, fmt.Sprintf(", server flags `%s`", strings.Join(b.serverFlags, " ")))
	if want["writes"] {
		fmt.Fprintln(b.progress, "failoverbench: leader kills under writes")
		r, err := b.writesCell(ctx)
		switch {
		case err != nil:
			fail("leader kills under writes", err)
		default:
			if !b.reportWrites(r) {
				failed = true
			}
		}
	}
	if want["daemon"] && ctx.Err() == nil {
		fmt.Fprintln(b.progress, "failoverbench: leader kills during daemon deployments")
		r, err := b.daemonCell(ctx)
		if err != nil {
			fail("leader kills during daemon deployments", err)
		} else {
			b.reportDaemon(r)
		}
	}
	if failed {
		return 1
	}
	return 0
}

// pollEvery calls ok every interval until it holds, ctx ends or limit
// passes.
func pollEvery(ctx context.Context, limit, interval time.Duration, ok func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for !ok() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met within %s", limit)
		case <-t.C:
		}
	}
	return nil
}
