package main

import (
	"fmt"
	"time"
	"trellis.dev/trellis/bench/internal/report"
)

// The daemon scheduler's targets (issue 4).
const (
	targetFresh       = 5 * time.Second // fresh deployment to 5,000 instances
	targetPlacements  = 1000.0          // placements a second
	targetBatchExtra  = 200 * time.Millisecond
	targetReactionP99 = time.Second // join → RUNNING, death → replacement RUNNING
	targetDaemonCPU   = 0.3         // leader, cores
)

func (b *bench) reportDaemon(r *daemonResult, er []etcdDeployRun) {
	w := b.out
	fmt.Fprintf(w, "## Daemon scheduler, %d simulated instances on 3 servers\n\n", r.instances)
	fmt.Fprintf(w, "3 `trellis server` processes and `trellis sim -instances %d -zones %d` (one process; every instance a real agent, "+
		"tasks started by the simulated driver at once; registered in %s). Environments are created and deployed through the HTTP API "+
		"(`POST /v1/environments`, `POST /v1/environments/{name}/deployments`) on the leader; a deployment is timed from the request sent "+
		"until its Deployment is seen `completed` on a watch, and then checked whole (the environment's status: every matching instance active). "+
		"Peer: etcd 3.4, 3 members, doing the raw store work of the same deployment (n creates in transactions of %d, each followed at once by "+
		"the task's RUNNING report, a conditional put from one of n concurrent clients spread over the members), while %d leases are kept alive "+
		"(the fleet cell's peer for heartbeating instances); no scheduling, a floor.\n\n",
		r.instances, daemonZones, report.Round(r.register), b.daemonBatch, r.instances)

	fmt.Fprintf(w, "### Fresh deployment\n\n")
	fmt.Fprintf(w, "| deployment | instances | Trellis | placements/s | in progress (leader's clock) | etcd, store work only | Trellis / etcd |\n|---|---|---|---|---|---|---|\n")
	for i, d := range append(append([]deployRun{}, r.fresh...), r.third) {
		peer, rt := "–", "–"
		if i < len(er) && i < len(r.fresh) {
			peer = fmt.Sprintf("%s (%.0f/s)", report.Round(er[i].took), er[i].perSec())
			rt = ratio(d.took, er[i].took)
		}
		fmt.Fprintf(w, "| %s | %d | **%s** | %.0f | %s | %s | %s |\n", d.label, d.total, report.Round(d.took), d.perSec(), report.Round(d.serverSpan), peer, rt)
	}
	fmt.Fprintf(w, "\nCPU used during each deployment (utime+stime from /proc; the machine has 2 cores), and instances marked down "+
		"for missed heartbeats (TTL 10 s) while it ran, seen on a watch:\n\n")
	for _, d := range append(append(append([]deployRun{}, r.fresh...), r.rolling), r.third) {
		fmt.Fprintf(w, "- %s: %s; %s\n", d.label, d.cpuSummary(), d.disruption())
	}
	for _, e := range er {
		fmt.Fprintf(w, "- etcd, the store work of %d: members %.1f s, clients (this process, with the %d keepalives) %.1f s\n",
			e.n, e.members.Seconds(), r.instances, e.client.Seconds())
	}
	if n := len(r.fresh); n > 0 {
		big := r.fresh[n-1]
		fmt.Fprintf(w, "\nTarget: %d instances in ≤ %s: %s (%s, %.2f× the target); ≥ %.0f placements/s: %s (%.0f/s).\n\n",
			big.total, targetFresh, met(big.took <= targetFresh), report.Round(big.took), big.took.Seconds()/targetFresh.Seconds(),
			targetPlacements, met(big.perSec() >= targetPlacements), big.perSec())
	}

	ro := r.rolling
	nb := ro.batches()
	extra := (ro.took - time.Duration(nb)*b.minHealthy) / time.Duration(nb)
	fmt.Fprintf(w, "### Rolling update\n\n")
	fmt.Fprintf(w, "%s: %d instances in batches of %d (%d batches), each waiting %s healthy before the next. "+
		"Total **%s**; minus %d × %s of health wait = %s; **%s of scheduler overhead per batch** (in progress by the leader's clock: %s).\n\n",
		ro.label, ro.total, ro.batchSize, nb, b.minHealthy, report.Round(ro.took), nb, b.minHealthy, report.Round(ro.took-time.Duration(nb)*b.minHealthy),
		report.Round(extra), report.Round(ro.serverSpan))
	fmt.Fprintf(w, "Target ≤ %s per batch: %s (%.2f× the target).\n\n", targetBatchExtra, met(extra <= targetBatchExtra), extra.Seconds()/targetBatchExtra.Seconds())

	js, rs := summarize(r.joins), summarize(r.repairs)
	fmt.Fprintf(w, "### Monitors: a joining instance, a dying task\n\n")
	fmt.Fprintf(w, "A second `trellis sim` of %d instances joins, %d a second; they match the environment that covers every instance. "+
		"Join: the Instance seen `ready` on a watch → its task seen RUNNING. Each of those tasks exits by itself (code 1) %s after it starts "+
		"(`-exit-rate 1`; no restart policy, so the task stops and the scheduler must place a new one): the container's exit (`finished_at`, "+
		"the agent's clock, the same machine) → a task started after it seen RUNNING on the same instance. The first death per instance counts.\n\n",
		len(r.joins), joinStartRate, joinExitAfter)
	fmt.Fprintf(w, "| event | samples | p50 | p99 | max |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| instance joins → task RUNNING | %d | %s | **%s** | %s |\n", js.n, report.Round(js.p50), report.Round(js.p99), report.Round(js.max))
	fmt.Fprintf(w, "| task dies → replacement RUNNING | %d | %s | **%s** | %s |\n\n", rs.n, report.Round(rs.p50), report.Round(rs.p99), report.Round(rs.max))
	fmt.Fprintf(w, "Instances marked down for missed heartbeats over the whole cell: %d.\n\n", r.downs)
	fmt.Fprintf(w, "Targets p99 ≤ %s: joins %s (%.2f×), replacements %s (%.2f×).\n\n", targetReactionP99,
		met(js.p99 <= targetReactionP99), js.p99.Seconds()/targetReactionP99.Seconds(), met(rs.p99 <= targetReactionP99), rs.p99.Seconds()/targetReactionP99.Seconds())

	fmt.Fprintf(w, "### Leader CPU at rest\n\n")
	fmt.Fprintf(w, "CPU (utime+stime from /proc over %s) and RSS with the %d instances heartbeating, before any environment exists "+
		"(the baseline, same run) and after the three environments are deployed and active (%d + %d + %d tasks), %s of rest after the last deployment.\n\n",
		report.Round(r.active.elapsed), r.instances, r.rolling.total, r.fresh[len(r.fresh)-1].total, r.third.total, b.settle)
	fmt.Fprintf(w, "| process | role | no environment: CPU · RSS | 3 active environments: CPU · RSS |\n|---|---|---|---|\n")
	for i, u := range r.active.procs {
		fmt.Fprintf(w, "| %s | %s | %.3f · %s | %.3f · %s |\n", u.label, u.role, r.idle.procs[i].cores, mb(r.idle.procs[i].rss), u.cores, mb(u.rss))
	}
	il, al := leaderOf(r.idle), leaderOf(r.active)
	fmt.Fprintf(w, "\nLeader with 3 active environments: **%.3f core** (%.3f without any: the scheduler adds %+.3f). Target < %.1f core: %s (%.2f× the target).%s\n\n",
		al.cores, il.cores, al.cores-il.cores, targetDaemonCPU, met(al.cores < targetDaemonCPU), al.cores/targetDaemonCPU, note(r.leaderNote, "Trellis"))
	fmt.Fprintf(w, "Machine during the windows: %.2f and %.2f cores busy (%.2f and %.2f not ours), load average %s → %s and %s → %s.\n\n",
		r.idle.busy, r.active.busy, r.idle.others, r.active.others, r.idle.load[0], r.idle.load[1], r.active.load[0], r.active.load[1])
}
