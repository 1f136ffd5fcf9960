package main

import (
	"fmt"
	"strings"
	"time"

	"trellis.dev/trellis/bench/internal/report"
)

func ms(d time.Duration) string { return report.Round(d).String() }

// reportWatch writes the watch cell's table and whether the target was
// met (a missed target is a figure, not a failure of the run).
func (b *bench) reportWatch(tr, er *watchResult) {
	ts, es := summarize(tr.fromSend), summarize(er.fromSend)
	ta, ea := summarize(tr.fromAck), summarize(er.fromAck)
	tw, ew := summarize(tr.write), summarize(er.write)
	fmt.Fprintf(b.out, "## A check's change seen by %d watchers on 3 servers\n\n", tr.watchers)
	fmt.Fprintf(b.out, "Trellis: %d Consul blocking queries (`GET /v1/health/service/%s?passing&index=N`) spread round-robin over the 3 servers (two of them followers, answering from their own informer); "+
		"each change is the task's check turning passing or critical, written as its agent writes it (`WriteStatuses` of the ServiceInstance's `status[\"agent\"]` on the leader, proven by the `trellis sim` instance's session). "+
		"etcd: %d watches of one key over its 3 members, each change a `Put` on the leader. %d changes each (after %d not counted), %s to %s apart. "+
		"Clock: this process's monotonic clock; a change's time starts just before the write is sent (or at its acknowledgement) and ends when the last watcher has read the answer (Trellis: its body read and parsed; etcd: the event received).\n\n",
		tr.watchers, service, er.watchers, ts.n, b.warmup, b.gap, 2*b.gap)
	fmt.Fprintln(b.out, "| | Trellis p50 | p99 | max | etcd p50 | p99 | max | Trellis/etcd p50 | p99 |")
	fmt.Fprintln(b.out, "|---|---|---|---|---|---|---|---|---|")
	row := func(name string, t, e summary) {
		fmt.Fprintf(b.out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, ms(t.p50), ms(t.p99), ms(t.max), ms(e.p50), ms(e.p99), ms(e.max), ratio(t.p50, e.p50), ratio(t.p99, e.p99))
	}
	row("write sent → last watcher", ts, es)
	row("write acknowledged → last watcher", ta, ea)
	row("the write alone", tw, ew)
	row("write sent → last watcher of the leader", summarize(tr.onLeader), summarize(er.onLeader))
	row("write sent → last watcher of the followers", summarize(tr.onFollowers), summarize(er.onFollowers))
	perChange := func(d time.Duration, n int) time.Duration { return d / time.Duration(max(n, 1)) }
	fmt.Fprintf(b.out, "| CPU per change, servers (summed) · this client | %s · %s | | | %s · %s | | | %s · %s | |\n",
		ms(perChange(tr.serverCPU, ts.n)), ms(perChange(tr.clientCPU, ts.n)), ms(perChange(er.serverCPU, es.n)), ms(perChange(er.clientCPU, es.n)),
		ratio(tr.serverCPU, er.serverCPU), ratio(tr.clientCPU, er.clientCPU))
	verdict := "met"
	if ts.p99 > watchTarget {
		verdict = "**not met**"
	}
	fmt.Fprintf(b.out, "\nTarget: p99 ≤ %s from the write's sending: %s (%s).\n\n", watchTarget, verdict, ms(ts.p99))
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func rssLine(rss []int64, leader int) string {
	var parts []string
	for i, r := range rss {
		role := "follower"
		if i == leader {
			role = "leader"
		}
		parts = append(parts, fmt.Sprintf("%s %s", mib(r), role))
	}
	return strings.Join(parts, ", ")
}

func (b *bench) reportRead(tr, er *readResult) {
	t, e := summarize(tr.latency), summarize(er.latency)
	fmt.Fprintf(b.out, "## %d registered service instances, and a fresh read of %d\n\n", b.instances, b.perService)
	fmt.Fprintf(b.out, "Trellis: %d ServiceInstances registered from outside Trellis (batches of %d), %d per service, each with an address, a port, 2 tags and 2 meta entries; "+
		"resident sizes read from /proc %s after the last write. Then %d fresh `GET /v1/health/service/%s?passing` (no index, one kept connection) on a follower, one after another. "+
		"etcd: %d keys of %d bytes (key and value: the Trellis answer's size over %d) in transactions of 128, the same pause, then %d serializable range reads of the %d keys of one prefix on a follower (its own store, as a Trellis follower reads its informer). "+
		"Clock: this process's monotonic clock, from just before the request is sent until the whole answer is read (Trellis: the body; etcd: the client's decoded response).\n\n",
		b.instances, batch, b.perService, b.settle, t.n, service, b.instances, er.bodySize/max(er.entries, 1), b.perService, e.n, b.perService)
	fmt.Fprintln(b.out, "| | Trellis | etcd | Trellis/etcd |")
	fmt.Fprintln(b.out, "|---|---|---|---|")
	fmt.Fprintf(b.out, "| read p50 | %s | %s | %s |\n", ms(t.p50), ms(e.p50), ratio(t.p50, e.p50))
	fmt.Fprintf(b.out, "| read p99 | %s | %s | %s |\n", ms(t.p99), ms(e.p99), ratio(t.p99, e.p99))
	fmt.Fprintf(b.out, "| answer | %d instances, %d bytes of JSON | %d keys, %d bytes of keys and values | |\n", tr.entries, tr.bodySize, er.entries, er.bodySize)
	fmt.Fprintf(b.out, "| resident size | %s | %s | %.2f× (leaders) |\n\n", rssLine(tr.rss, tr.leader), rssLine(er.rss, er.leader), float64(tr.rss[tr.leader])/float64(er.rss[er.leader]))
}
