// Command cabench measures the Connect CA's leaf signing on a 3-server
// cluster and prints a Markdown report:
//
//   - it starts 3 `trellis server` processes (the binary given by
//     -trellis), waits until every server has the CA's active root, and
//     pre-generates -csrs fresh P-256 keys and CSRs, one per request
//     (timed apart: that is the client's cost, not the CA's);
//   - then -clients concurrent clients, spread round-robin over the 3
//     servers (one gRPC connection per server, shared by its clients,
//     over TLS with the cluster CA made by `trellis tls`, unless
//     -plaintext),
//     call CAService.Sign as fast as they can for -duration after a
//     -warmup, each request with a CSR never sent before: signatures per
//     second, p50/p99 latency, refusals and rate-limited answers, the
//     servers' CPU and the client's own;
//   - in the same run, in this process, the ceiling: the signer's own
//     work per leaf (parse and check the CSR, sign the leaf with the leaf
//     encoder, encode it) on one core and on all cores, and the ratio of
//     the cluster's rate to it; beside it, the leaf encoder alone and
//     x509.CreateCertificate alone;
//   - every -verify-every'th leaf is kept and, after the timed phase,
//     verified as a TLS peer would against the roots the servers publish
//     (GET /v1/ca/roots), with its SPIFFE id and public key checked
//     against the CSR it answers: a benchmark cannot pass on garbage.
//
// Every process it starts is ended when it finishes or fails.
//
//	go run ./cmd/cabench -trellis ../bin/trellis
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"trellis.dev/trellis/bench/internal/harness"
)

// target is the issue's: signatures per second on 3 servers on this
// 2-core machine, the client's CSR generation counted apart.
const target = 5000

type bench struct {
	trellis     string
	dir         string
	serverFlags []string
	out         io.Writer
	progress    io.Writer

	servers, clients, csrs, verifyEvery int
	duration, warmup, ceilingTime       time.Duration
	profile                             bool
	plaintext                           bool
}

func main() { os.Exit(run()) }

func run() int {
	b := &bench{}
	flag.StringVar(&b.trellis, "trellis", "bin/trellis", "the trellis binary to measure")
	serverFlags := flag.String("server-flags", "", "extra flags for every `trellis server`, space-separated")
	flag.IntVar(&b.servers, "servers", 3, "servers in the cluster")
	flag.IntVar(&b.clients, "clients", 48, "concurrent clients, spread round-robin over the servers")
	flag.IntVar(&b.csrs, "csrs", 100000, "fresh CSRs generated before the timed phase (one per request; the phase ends early if they run out)")
	flag.DurationVar(&b.duration, "duration", 8*time.Second, "length of the timed phase")
	flag.DurationVar(&b.warmup, "warmup", time.Second, "signing before the timed phase, not counted")
	flag.DurationVar(&b.ceilingTime, "ceiling-time", time.Second, "length of each round of an in-process ceiling measurement (the best of 3 rounds is kept)")
	flag.IntVar(&b.verifyEvery, "verify-every", 50, "keep and verify every Nth leaf")
	flag.BoolVar(&b.plaintext, "plaintext", false, "serve the public gRPC port without TLS (by default the servers run with -tls-* files from `trellis tls`, as a production cluster does, and the clients verify them)")
	flag.BoolVar(&b.profile, "profile", false, "fetch each server's CPU profile of the timed phase into the kept working directory")
	outPath := flag.String("out", "", "also write the report to this file")
	keep := flag.Bool("keep", false, "keep the working directory (data dirs and logs) even when the run succeeds")
	flag.Parse()

	if b.servers < 1 || b.clients < 1 || b.csrs < 1 || b.verifyEvery < 1 {
		log.Printf("-servers, -clients, -csrs and -verify-every must be at least 1")
		return 2
	}
	if b.duration <= 0 || b.warmup < 0 || b.ceilingTime <= 0 {
		log.Printf("-duration and -ceiling-time must be positive, -warmup not negative")
		return 2
	}
	b.serverFlags = strings.Fields(*serverFlags)
	var err error
	if b.trellis, err = harness.Binary(b.trellis); err != nil {
		log.Print(err)
		return 2
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	h, err := harness.Start("cabench", *outPath)
	if err != nil {
		log.Print(err)
		return 1
	}
	b.dir, b.out, b.progress = h.Dir, h.Out, os.Stderr
	failed := false
	defer func() { h.End(failed || *keep || b.profile, "data dirs, logs and profiles") }()

	h.Header(b.trellis, fmt.Sprintf(", server flags `%s`", strings.Join(b.serverFlags, " ")))
	r, err := b.signCell(ctx)
	if err != nil {
		failed = true
		fmt.Fprintf(b.out, "**leaf signatures: failed: %v**\n\n", err)
		return 1
	}
	// The ceiling is measured once the cluster is gone, on a machine
	// without it.
	fmt.Fprintf(b.progress, "cabench: the in-process ceiling\n")
	if r.ceiling, err = measureCeiling(b.ceilingTime, r.trustDomain, r.datacenter); err != nil {
		failed = true
		fmt.Fprintf(b.out, "**ceiling: failed: %v**\n\n", err)
		return 1
	}
	if !b.reportSign(r) {
		failed = true
		return 1
	}
	return 0
}
