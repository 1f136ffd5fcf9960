package main

import (
	"fmt"
	"slices"
	"time"
	"trellis.dev/trellis/bench/internal/report"

	"github.com/anishathalye/porcupine"
)

// failoverTarget is the bound on a failover, p50 and max.
const failoverTarget = 3 * time.Second

// dist is the median and the maximum of a set of durations.
type dist struct {
	n             int
	p50, min, max time.Duration
}

func summarize(ds []time.Duration) dist {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return dist{}
	}
	// Nearest rank: the smallest value with at least half of the samples
	// at or below it.
	return dist{n: len(s), p50: s[(len(s)+1)/2-1], min: s[0], max: s[len(s)-1]}
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// reportWrites prints the writes cell; false when the history was not
// linearizable (or could not be checked).
func (b *bench) reportWrites(r *writesResult) bool {
	w := b.out
	fmt.Fprintf(w, "## Leader killed under writes (%d kills, %d writers over 3 servers)\n\n", len(r.kills), b.writers)
	fmt.Fprintf(w, "| kill | leader | survivors agree on a new leader | first write acknowledged | writes of unknown outcome |\n|---|---|---|---|---|\n")
	var elected, first []time.Duration
	for i, k := range r.kills {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %d |\n", i+1, k.leader, report.Round(k.elected), report.Round(k.firstWrite), k.unknown)
		elected = append(elected, k.elected)
		first = append(first, k.firstWrite)
	}
	e, f := summarize(elected), summarize(first)
	fmt.Fprintf(w, "\n| | p50 | max |\n|---|---|---|\n")
	fmt.Fprintf(w, "| kill → new leader agreed | %s | %s |\n", report.Round(e.p50), report.Round(e.max))
	fmt.Fprintf(w, "| **kill → first acknowledged write** | **%s** | **%s** |\n\n", report.Round(f.p50), report.Round(f.max))
	fmt.Fprintf(w, "Target: p50 and max ≤ %s: %s. Leader changes that no kill caused: %d.\n\n", failoverTarget, met(f.p50 <= failoverTarget && f.max <= failoverTarget), r.unprompted)
	fmt.Fprintf(w, "No acknowledged write lost: %d writes acknowledged, %d of unknown outcome; the history of %d operations (with strong reads of every key at the end, through every server) is ", r.acked, r.unknown, r.ops)
	switch r.check {
	case porcupine.Ok:
		fmt.Fprintf(w, "linearizable.\n\n")
		return true
	case porcupine.Illegal:
		fmt.Fprintf(w, "**not linearizable** (visualization: %s).\n\n", r.vis)
	default:
		fmt.Fprintf(w, "**not checked**: the checker ran out of time.\n\n")
	}
	return false
}

// reportDaemon prints the daemon cell.
func (b *bench) reportDaemon(r *daemonResult) {
	w := b.out
	fmt.Fprintf(w, "## Leader killed during daemon deployments (%d simulated instances, 2 environments of %d, min_healthy_percent 50, min_healthy_time %s)\n\n",
		b.instances, b.instances/len(daemonEnvs), b.minHealthy)
	fmt.Fprintf(w, "| deployment | leader killed | start → both whole | kill → both whole |\n|---|---|---|---|\n")
	var plain, killed, after []time.Duration
	for i, run := range r.runs {
		if run.killed == "" {
			fmt.Fprintf(w, "| %d | – | %s | – |\n", i+1, report.Round(run.took))
			plain = append(plain, run.took)
			continue
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s |\n", i+1, run.killed, report.Round(run.took), report.Round(run.afterKill))
		killed = append(killed, run.took)
		after = append(after, run.afterKill)
	}
	p, k, a := summarize(plain), summarize(killed), summarize(after)
	fmt.Fprintf(w, "\n| | p50 | max |\n|---|---|---|\n")
	fmt.Fprintf(w, "| deployment, no kill: start → both whole | %s | %s |\n", report.Round(p.p50), report.Round(p.max))
	fmt.Fprintf(w, "| deployment, leader killed: start → both whole | %s | %s |\n", report.Round(k.p50), report.Round(k.max))
	fmt.Fprintf(w, "| **leader killed → both whole** | **%s** | **%s** |\n\n", report.Round(a.p50), report.Round(a.max))
}
