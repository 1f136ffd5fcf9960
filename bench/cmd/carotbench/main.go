// Command carotbench measures a Connect CA root rotation under a fleet of
// agents holding leaves, and prints a Markdown report:
//
//   - it starts 3 `trellis server` processes (the binary given by
//     -trellis) and one `trellis sim` of -agents instances with
//     -ca-leaves: each instance a real agent with a leaf cache of the
//     real leaves package holding its agent leaf, signed through
//     CAService.Sign, re-signed within -window after a rotation;
//   - it waits until every instance holds a leaf of the active root;
//   - for each limit of -limits in turn, it sets csr_max_per_second
//     (`trellis ca config set`), waits until every server reads it back,
//     and rotates the root (`trellis ca rotate`), reading each server's
//     /v1/metrics every -sample (trellis_ca_signatures_total and
//     trellis_ca_sign_rate_limited_total) and the sim's count of
//     instances holding a leaf of the new root every 250 ms, until every
//     instance does;
//   - it reports, per rotation: the servers' peak signing rate over any
//     1 s and any 250 ms, all servers together and the busiest one,
//     against the limit (which is per server); the time from the rotation
//     until the last instance holds a leaf of the new root, against the
//     window; the rate-limited answers; signatures per second over the
//     window (a histogram); and every -verify-every'th instance's agent
//     leaf verified as a TLS peer would, against the new root alone and
//     against the old root alone (through the cross-signed intermediate).
//
// The sim shares one roots watch and one connection per server among its
// caches (a real agent has its own); see `trellis sim --help`. Every
// process it starts is ended when it finishes or fails.
//
//	go run ./cmd/carotbench -trellis ../bin/trellis
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"trellis.dev/trellis/bench/internal/harness"
)

type bench struct {
	trellis  string
	dir      string
	out      io.Writer
	progress io.Writer

	servers, agents, verifyEvery int
	window, sample, grace        time.Duration
	limits                       []float64
	serviceLeaf                  bool
}

func main() { os.Exit(run()) }

func run() int {
	b := &bench{}
	flag.StringVar(&b.trellis, "trellis", "bin/trellis", "the trellis binary to measure")
	flag.IntVar(&b.servers, "servers", 3, "servers in the cluster")
	flag.IntVar(&b.agents, "agents", 5000, "simulated agents, each holding its agent leaf")
	flag.BoolVar(&b.serviceLeaf, "service-leaf", false, "each agent holds one service leaf too (-ca-service-leaf)")
	flag.DurationVar(&b.window, "window", 30*time.Second, "the agents' re-signing window after a rotation (-ca-resign-window)")
	limits := flag.String("limits", "10000,50", "csr_max_per_second of each rotation in turn (per server), comma-separated")
	flag.DurationVar(&b.sample, "sample", 100*time.Millisecond, "how often each server's metrics are read")
	flag.DurationVar(&b.grace, "grace", 2*time.Minute, "how long after the window the last agent may take before the run fails")
	flag.IntVar(&b.verifyEvery, "verify-every", 50, "verify the agent leaf of every Nth agent after each rotation")
	outPath := flag.String("out", "", "also write the report to this file")
	keep := flag.Bool("keep", false, "keep the working directory (data dirs and logs) even when the run succeeds")
	flag.Parse()

	if b.servers < 1 || b.agents < 1 || b.verifyEvery < 1 {
		log.Printf("-servers, -agents and -verify-every must be at least 1")
		return 2
	}
	if b.window <= 0 || b.sample <= 0 || b.grace <= 0 {
		log.Printf("-window, -sample and -grace must be positive")
		return 2
	}
	for _, f := range strings.Split(*limits, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			log.Printf("-limits: %q is not a positive rate", f)
			return 2
		}
		b.limits = append(b.limits, v)
	}
	var err error
	if b.trellis, err = harness.Binary(b.trellis); err != nil {
		log.Print(err)
		return 2
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	h, err := harness.Start("carotbench", *outPath)
	if err != nil {
		log.Print(err)
		return 1
	}
	b.dir, b.out, b.progress = h.Dir, h.Out, os.Stderr
	failed := false
	defer func() { h.End(failed || *keep, "data dirs and logs") }()

	leaves := "its agent leaf"
	if b.serviceLeaf {
		leaves = "its agent leaf and a service leaf (`-ca-service-leaf`)"
	}
	h.Header(b.trellis, fmt.Sprintf(". %d servers, %d simulated agents (`trellis sim -ca-leaves`), each holding %s, re-signing window %s",
		b.servers, b.agents, leaves, b.window))
	results, err := b.rotations(ctx)
	for _, r := range results {
		if !b.reportRotation(r) {
			failed = true
		}
	}
	if err != nil {
		failed = true
		fmt.Fprintf(b.out, "**failed: %v**\n\n", err)
	}
	if failed {
		return 1
	}
	return 0
}
