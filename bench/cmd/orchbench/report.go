package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"trellis.dev/trellis/bench/internal/report"
)

// dist is the summary of a set of durations.
type dist struct {
	n                  int
	p50, p99, min, max time.Duration
}

func summarize(ds []time.Duration) dist {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return dist{}
	}
	// Nearest rank: the smallest value with at least p of the samples at
	// or below it.
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	return dist{n: len(s), p50: rank(0.50), p99: rank(0.99), min: s[0], max: s[len(s)-1]}
}

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f×", float64(a)/float64(b))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func mb(b int64) string { return fmt.Sprintf("%d MB", b>>20) }

func (b *bench) reportStart(r *startResult) {
	w := b.out
	fmt.Fprintf(w, "## Task start latency, exec driver\n\n")
	fmt.Fprintf(w, "One `trellis server` and one `trellis agent` (real processes); each task runs `sleep` in one exec container. "+
		"Time from the Task write's acknowledgement to its RUNNING report seen on a watch of the Tasks. "+
		"Peer: the same process (`sleep`, own process group, output to files) started with os/exec by this benchmark, "+
		"timed from its first file opened to `Start` returning (fork/exec done). "+
		"At most %d tasks run at once; they are stopped and deleted between groups, outside the timing. Load average %s → %s.\n\n",
		b.burst, r.load[0], r.load[1])
	fmt.Fprintf(w, "| placement | tasks | Trellis p50 | Trellis p99 | Trellis max | os/exec p50 | os/exec p99 | p50 ratio | p99 ratio |\n|---|---|---|---|---|---|---|---|---|\n")
	var p50, p99 time.Duration
	for _, m := range r.modes {
		ts, es := summarize(m.lat), summarize(m.exec)
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s |\n", m.label, ts.n,
			report.Round(ts.p50), report.Round(ts.p99), report.Round(ts.max), report.Round(es.p50), report.Round(es.p99), ratio(ts.p50, es.p50), ratio(ts.p99, es.p99))
		p50, p99 = max(p50, ts.p50), max(p99, ts.p99)
	}
	fmt.Fprintf(w, "\nWhere the time goes, from the RUNNING report's own timestamps (p50 · p99; every process is on this machine, one clock): "+
		"the agent learns of the task and starts it (acknowledgement → `started_at`); the agent saves its state and waits for more changes "+
		"to batch (→ `reported_at`); the report is written through Raft and reaches the watch (→ seen). "+
		"Also the Task write itself (not in the latencies), and the CPU time the agent and the server spent per task, start and stop included "+
		"(utime+stime from /proc: unlike the latencies, other load on the machine barely moves it).\n\n")
	fmt.Fprintf(w, "| placement | learn and start | save and batch | write and watch | Task write | agent CPU per task | server CPU per task |\n|---|---|---|---|---|---|---|\n")
	for _, m := range r.modes {
		a, c, d, wr := summarize(m.phases.start), summarize(m.phases.collect), summarize(m.phases.write), summarize(m.writes)
		fmt.Fprintf(w, "| %s | %s · %s | %s · %s | %s · %s | %s · %s | %s | %s |\n", m.label, report.Round(a.p50), report.Round(a.p99), report.Round(c.p50), report.Round(c.p99),
			report.Round(d.p50), report.Round(d.p99), report.Round(wr.p50), report.Round(wr.p99), report.Round(m.agentCPU), report.Round(m.serverCPU))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Targets: p50 ≤ 50 ms: %s (worst %s); p99 ≤ 200 ms: %s (worst %s).\n\n",
		met(p50 <= 50*time.Millisecond), report.Round(p50), met(p99 <= 200*time.Millisecond), report.Round(p99))
}

func (b *bench) reportFleet(tr, er *fleetResult) {
	w := b.out
	fmt.Fprintf(w, "## %d instances heartbeating against 3 servers\n\n", b.instances)
	fmt.Fprintf(w, "Trellis: 3 `trellis server` processes and `trellis sim -instances %d` (one process; each instance a real agent "+
		"heartbeating every TTL/3 and watching its tasks, spread over the servers). etcd: 3 members and %d leases "+
		"(TTL %d s, a key on each) kept alive by etcd's client from this process, the clients spread over the members. "+
		"Every instance registered (Trellis %s, etcd %s), then %s of rest, then CPU (utime+stime from /proc over %s) and resident size "+
		"(sampled every %s: at the end, and the highest).\n\n",
		b.instances, b.instances, leaseTTL, report.Round(tr.register), report.Round(er.register), b.settle, report.Round(tr.win.elapsed), rssSample)
	fmt.Fprintf(w, "| system | process | role | CPU (cores) | RSS | RSS max |\n|---|---|---|---|---|---|\n")
	for _, r := range []*fleetResult{tr, er} {
		for _, u := range r.win.procs {
			fmt.Fprintf(w, "| %s | %s | %s | %.3f | %s | %s |\n", strings.Fields(u.label)[0], u.label, u.role, u.cores, mb(u.rss), mb(u.rssMax))
		}
	}
	tl, el := leaderOf(tr.win), leaderOf(er.win)
	ts, es := serversCPU(tr.win), serversCPU(er.win)
	fmt.Fprintf(w, "\nLeader: Trellis %.3f cores, %s; etcd %.3f cores, %s: **%.1f× etcd's CPU, %.1f× its RSS**. "+
		"All three servers: Trellis %.3f cores, etcd %.3f (%.1f×).\n\n",
		tl.cores, mb(tl.rss), el.cores, mb(el.rss), tl.cores/max(el.cores, 1e-9), float64(tl.rss)/float64(max(el.rss, 1)),
		ts, es, ts/max(es, 1e-9))
	fmt.Fprintf(w, "Heartbeats taken by the Trellis leader: %.0f/s; etcd keepalives answered: %.0f/s. Trellis instances marked down during the window: %d.%s%s\n\n",
		tr.beatsPerSec, er.beatsPerSec, tr.downsDuring, note(tr.leaderNote, "Trellis"), note(er.leaderNote, "etcd"))
	fmt.Fprintf(w, "Machine during the windows: Trellis %.2f cores busy of the machine (%.2f not ours), load average %s → %s; "+
		"etcd %.2f busy (%.2f not ours), load average %s → %s.\n\n",
		tr.win.busy, tr.win.others, tr.win.load[0], tr.win.load[1], er.win.busy, er.win.others, er.win.load[0], er.win.load[1])
	fmt.Fprintf(w, "Targets (the leader): CPU < 0.5 core: %s; RSS < 500 MB: %s.\n\n", met(tl.cores < 0.5), met(tl.rss < 500<<20))

	fmt.Fprintf(w, "### Time to detect a dead instance (TTL %d s), under the same load\n\n", leaseTTL)
	fmt.Fprintf(w, "Trellis: a separate `trellis sim -instances 1` killed with SIGKILL, timed to the Instance written `down` (seen on a watch). "+
		"etcd: one more lease whose keepalive is cancelled, timed to its key's DELETE (seen on a watch). "+
		"Each is stopped 4–8 s after it first heartbeats, a random point in its heartbeat interval, so the figures range from about TTL − TTL/3 to TTL.\n\n")
	fmt.Fprintf(w, "| round | Trellis | etcd |\n|---|---|---|\n")
	for i := range max(len(tr.detect), len(er.detect)) {
		fmt.Fprintf(w, "| %d | %s | %s |\n", i+1, at(tr.detect, i), at(er.detect, i))
	}
	td, ed := summarize(tr.detect), summarize(er.detect)
	fmt.Fprintf(w, "\nWorst: Trellis %s, etcd %s (%s). Target ≤ TTL + 2 s = 12 s: %s.\n\n", report.Round(td.max), report.Round(ed.max), ratio(td.max, ed.max), met(td.max <= 12*time.Second))
}

func note(s, who string) string {
	if s == "" {
		return ""
	}
	return fmt.Sprintf(" %s: %s.", who, s)
}

func at(ds []time.Duration, i int) string {
	if i >= len(ds) {
		return "–"
	}
	return report.Round(ds[i]).String()
}

func leaderOf(w *window) usage {
	for _, u := range w.procs {
		if u.role == "leader" {
			return u
		}
	}
	return usage{}
}

func serversCPU(w *window) float64 {
	var c float64
	for _, u := range w.procs {
		if u.role != "client" {
			c += u.cores
		}
	}
	return c
}

func (b *bench) reportRSS(r *rssResult) {
	w := b.out
	fmt.Fprintf(w, "## Agent memory, exec driver\n\n")
	fmt.Fprintf(w, "One `trellis agent` process (one `trellis server` beside it); its resident size (VmRSS) with no task, then with %d tasks "+
		"(`sleep`, one exec container each) placed at once, right after all are reported RUNNING and %s later. No natural peer: "+
		"the agent with no task is the baseline. Load average %s → %s.\n\n", r.tasks, rssSettle, r.load[0], r.load[1])
	fmt.Fprintf(w, "| tasks | RSS |\n|---|---|\n| 0 | %s |\n| %d, all RUNNING | %s |\n| %d, %s later | %s (peak %s) |\n\n",
		mb(r.idle), r.tasks, mb(r.loaded), r.tasks, rssSettle, mb(r.rest), mb(r.hw))
	fmt.Fprintf(w, "Target ≤ 40 MB with %d tasks: %s.\n\n", r.tasks, met(max(r.loaded, r.rest) <= 40<<20))
}
