// Command peerbench measures Trellis against etcd on this machine, in one
// run, with the same workload and the same durability (fsync on), and
// prints the figures and their ratios as a Markdown report.
//
// It starts real processes on loopback: `trellis server` clusters of 1 and
// 3 members and etcd clusters of 1 and 3 members, one at a time.
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
	"time"

	"trellis.dev/trellis/bench/internal/etcdpeer"
	"trellis.dev/trellis/bench/internal/harness"
	"trellis.dev/trellis/bench/internal/report"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	trellisBin := flag.String("trellis", "bin/trellis", "the trellis binary to measure")
	etcdBin := flag.String("etcd", "etcd", "the etcd binary to compare with (\"\" with -only rss: measure Trellis alone)")
	dur := flag.Duration("duration", 5*time.Second, "how long each write cell is measured")
	sizes := flag.String("sizes", "1,3", "cluster sizes to measure")
	skip := flag.String("skip", "", "comma-separated parts to skip: writes,batch,fanout,rss")
	only := flag.String("only", "", "run only this part: writes, fanout or rss")
	gogcs := flag.String("rss-gogc", ",50", "comma-separated GOGC settings the memory part runs Trellis under (empty: Go's default)")
	out := flag.String("out", "", "also write the report to this file")
	extra := flag.String("trellis-flags", "", "space-separated flags for every trellis server (such as -enable-debug, to profile one; the servers' HTTP addresses are logged)")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	h, err := harness.Start("peerbench", *out)
	if err != nil {
		log.Fatal(err)
	}
	defer h.End(false, "")
	w := h.Out
	b := &bench{ctx: ctx, trellis: *trellisBin, etcd: *etcdBin, dir: h.Dir, dur: *dur, out: w, extra: strings.Fields(*extra)}
	h.Title()
	if *etcdBin != "" {
		fmt.Fprintf(w, "Trellis `%s` against `%s` (%s), 256-byte values, fsync on for both.\n\n", *trellisBin, *etcdBin, etcdpeer.Version(*etcdBin))
	} else if *only != "rss" {
		log.Fatal("-etcd \"\" is only for -only rss: the other parts compare with etcd")
	}
	parts := map[string]bool{}
	for _, p := range strings.Split(*skip, ",") {
		parts[p] = true
	}
	if *only != "" {
		if *only != "writes" && *only != "fanout" && *only != "rss" {
			log.Fatalf("-only %q: want writes, fanout or rss", *only)
		}
		for _, p := range []string{"writes", "batch", "fanout", "rss"} {
			parts[p] = p != *only && !(*only == "writes" && p == "batch")
		}
	}
	for _, s := range strings.Split(*sizes, ",") {
		var n int
		fmt.Sscan(s, &n)
		if !parts["writes"] {
			b.writes(n, !parts["batch"])
		}
	}
	if !parts["fanout"] {
		b.fanout()
	}
	if !parts["rss"] {
		for _, g := range strings.Split(*gogcs, ",") {
			b.rss(g)
		}
	}
}

type bench struct {
	ctx           context.Context
	trellis, etcd string
	dir           string
	dur           time.Duration
	out           io.Writer
	extra         []string // flags for every trellis server
}

func (b *bench) fatal(format string, args ...any) {
	log.Fatalf(format, args...)
}

var concurrencies = []int{1, 16, 64}

// rssSettle is how long the memory benchmark waits, idle, before reading
// the resident size at rest (a measurement pause, not a wait for a
// condition).
const rssSettle = 30 * time.Second

func (b *bench) writes(n int, batches bool) {
	fmt.Fprintf(b.out, "## Writes, %d server(s)\n\n", n)
	tc, err := startTrellis(b.ctx, b.trellis, b.extra, b.dir, n)
	if err != nil {
		b.fatal("%v", err)
	}
	res := map[string]result{}
	for _, conc := range concurrencies {
		h := newTrellisHTTP(tc, conc)
		res[fmt.Sprintf("http/%d", conc)] = runWrites(b.ctx, h, fmt.Sprintf("http%d", conc), conc, b.dur, tc.cpu)
		h.close()
		g, err := newTrellisGRPC(tc)
		if err != nil {
			b.fatal("%v", err)
		}
		res[fmt.Sprintf("grpc/%d", conc)] = runWrites(b.ctx, g, fmt.Sprintf("grpc%d", conc), conc, b.dur, tc.cpu)
		g.close()
	}
	var batchRate, batchRate4 float64
	if batches {
		batchRate, err = runBatches(b.ctx, tc, 20_000, 1000, 1, fmt.Sprintf("batch%d", n))
		if err != nil {
			b.fatal("batch: %v", err)
		}
		batchRate4, err = runBatches(b.ctx, tc, 40_000, 1000, 4, fmt.Sprintf("batch4-%d", n))
		if err != nil {
			b.fatal("batch: %v", err)
		}
	}
	tc.stop()

	ec, err := startEtcd(b.ctx, b.etcd, b.dir, n)
	if err != nil {
		b.fatal("%v", err)
	}
	for _, conc := range concurrencies {
		e, err := newEtcdWriter(ec)
		if err != nil {
			b.fatal("%v", err)
		}
		res[fmt.Sprintf("etcd/%d", conc)] = runWrites(b.ctx, e, fmt.Sprintf("etcd%d", conc), conc, b.dur, ec.cpu)
		e.close()
	}
	ec.stop()

	fmt.Fprintf(b.out, "| writers | system | throughput | p50 | p99 | errors | ratio to etcd | server CPU/write |\n|---|---|---|---|---|---|---|---|\n")
	for _, conc := range concurrencies {
		etcd := res[fmt.Sprintf("etcd/%d", conc)]
		for _, sys := range []string{"trellis HTTP", "trellis gRPC", "etcd"} {
			key := map[string]string{"trellis HTTP": "http", "trellis gRPC": "grpc", "etcd": "etcd"}[sys]
			r := res[fmt.Sprintf("%s/%d", key, conc)]
			fmt.Fprintf(b.out, "| %d | %s | %.0f/s | %s | %s | %d | %.2f× | %s |\n", conc, sys, r.throughput(), report.Round(r.p50), report.Round(r.p99), r.errors, r.throughput()/etcd.throughput(), r.cpuPerOp.Round(time.Microsecond))
		}
	}
	if batches {
		fmt.Fprintf(b.out, "\nAtomic batch writes of 1,000 resources through gRPC: **%.0f resources/s** one batch at a time (20 batches), **%.0f resources/s** with 4 batches in flight (40 batches)\n", batchRate, batchRate4)
	}
	fmt.Fprintln(b.out)
}

func (b *bench) fanout() {
	f := fanout{watchers: 1000, writes: 200, interval: 10 * time.Millisecond}
	fmt.Fprintf(b.out, "## Watch fan-out, 1 server\n\n%d watchers on one type; %d writes; time from a write's acknowledgement until the last watcher has it.\n\n", f.watchers, f.writes)
	tc, err := startTrellis(b.ctx, b.trellis, b.extra, b.dir, 1)
	if err != nil {
		b.fatal("%v", err)
	}
	tr, err := f.trellis(b.ctx, tc)
	tc.stop()
	if err != nil {
		b.fatal("trellis fan-out: %v", err)
	}
	ec, err := startEtcd(b.ctx, b.etcd, b.dir, 1)
	if err != nil {
		b.fatal("%v", err)
	}
	er, err := f.etcd(b.ctx, ec)
	ec.stop()
	if err != nil {
		b.fatal("etcd fan-out: %v", err)
	}
	fmt.Fprintf(b.out, "| system | p50 | p99 |\n|---|---|---|\n| trellis | %s | %s |\n| etcd | %s | %s |\n\n", report.Round(tr.p50), report.Round(tr.p99), report.Round(er.p50), report.Round(er.p99))
}

// rss loads 100,000 resources into one server run with GOGC=gogc ("" for
// Go's default) and reports its resident size; etcd likewise.
func (b *bench) rss(gogc string) {
	const n = 100_000
	setting := "Go's default GC setting (GOGC=100)"
	if gogc != "" {
		setting = "GOGC=" + gogc
	}
	fmt.Fprintf(b.out, "## Memory with %d stored 256-byte resources, 1 server, %s\n\n", n, setting)
	os.Setenv("GOGC", gogc)
	defer os.Unsetenv("GOGC")
	tc, err := startTrellis(b.ctx, b.trellis, b.extra, b.dir, 1)
	if err != nil {
		b.fatal("%v", err)
	}
	before, _ := tc.members[0].rss()
	if _, err := runBatches(b.ctx, tc, n, 1000, 4, "rss"); err != nil {
		b.fatal("rss load: %v", err)
	}
	after, err := tc.members[0].rss()
	if err != nil {
		b.fatal("%v", err)
	}
	// At rest: the Go runtime returns memory it no longer needs within a
	// minute or so of the load ending.
	time.Sleep(rssSettle)
	rest, err := tc.members[0].rss()
	tc.stop()
	if err != nil {
		b.fatal("%v", err)
	}
	if b.etcd == "" {
		fmt.Fprintf(b.out, "| system | RSS empty | RSS right after loading %d | RSS %s later, at rest |\n|---|---|---|---|\n| trellis | %d MB | %d MB | %d MB |\n\n",
			n, rssSettle, before>>20, after>>20, rest>>20)
		return
	}

	ec, err := startEtcd(b.ctx, b.etcd, b.dir, 1)
	if err != nil {
		b.fatal("%v", err)
	}
	ebefore, _ := ec.members[0].rss()
	if err := loadEtcd(b.ctx, ec, n); err != nil {
		b.fatal("etcd load: %v", err)
	}
	eafter, err := ec.members[0].rss()
	if err != nil {
		b.fatal("%v", err)
	}
	time.Sleep(rssSettle)
	erest, err := ec.members[0].rss()
	ec.stop()
	if err != nil {
		b.fatal("%v", err)
	}
	fmt.Fprintf(b.out, "| system | RSS empty | RSS right after loading %d | RSS %s later, at rest |\n|---|---|---|---|\n| trellis | %d MB | %d MB | %d MB |\n| etcd | %d MB | %d MB | %d MB |\n\n",
		n, rssSettle, before>>20, after>>20, rest>>20, ebefore>>20, eafter>>20, erest>>20)
}

// loadEtcd stores n keys in transactions of 128 puts (etcd's default limit).
func loadEtcd(ctx context.Context, c *cluster, n int) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + c.members[0].grpcAddr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	for i := 0; i < n; i += 128 {
		var ops []clientv3.Op
		for j := i; j < min(i+128, n); j++ {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("/rss/%d", j), payload))
		}
		if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
	}
	return nil
}
