package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// counters is the sum, over the servers, of every sample their
// /v1/metrics serve, by series (name and labels). Histogram buckets are
// left out: their counts say nothing a _count does not.
type counters map[string]float64

// readCounters reads every server's metrics. A server that does not
// answer is left out (its series then show as a drop, not an error).
func readCounters(servers []*server) counters {
	c := counters{}
	client := http.Client{Timeout: 5 * time.Second}
	for _, s := range servers {
		resp, err := client.Get("http://" + s.httpAddr + "/v1/metrics")
		if err != nil {
			continue
		}
		addSamples(c, resp.Body)
		resp.Body.Close()
	}
	return c
}

// addSamples adds the samples of a Prometheus text exposition to c.
func addSamples(c counters, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		series := line[:i]
		if strings.Contains(series, "_bucket{") {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		c[series] += v
	}
}

// phaseDelta lists the series that grew between before and after, the
// largest first, at most n of them, and then every controller's reconcile
// time and count, however small.
func phaseDelta(before, after counters, n int) []string {
	type grew struct {
		series string
		by     float64
	}
	var gs, kept []grew
	for s, v := range after {
		d := v - before[s]
		if d <= 0 {
			continue
		}
		name, _, _ := strings.Cut(s, "{")
		switch {
		case strings.Contains(name, "reconcile_duration_seconds"):
			kept = append(kept, grew{s, d})
		case !strings.HasSuffix(name, "_sum") && !strings.Contains(name, "_seconds") &&
			!strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") && !strings.Contains(name, "raft_library"):
			gs = append(gs, grew{s, d})
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].by > gs[j].by })
	sort.Slice(kept, func(i, j int) bool { return kept[i].series < kept[j].series })
	var out []string
	for _, g := range append(gs[:min(n, len(gs))], kept...) {
		out = append(out, fmt.Sprintf("%14.3f  %s", g.by, g.series))
	}
	return out
}
