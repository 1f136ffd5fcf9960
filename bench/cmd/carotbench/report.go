package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// reportRotation writes one rotation's section, and says whether it
// passed: every agent re-signed, no server's peak over 1 s above its
// limit, every sampled leaf verified.
func (b *bench) reportRotation(r *rotation) bool {
	w := b.out
	fmt.Fprintf(w, "## Rotation with csr_max_per_second %s per server\n\n", thousands(r.limit))
	fmt.Fprintf(w, "Load average %s at the rotation, %s after.\n\n", r.loadStart, r.loadEnd)
	var during []point
	for _, p := range r.points {
		if !p.at.Before(r.start) {
			during = append(during, p)
		}
	}
	total := growth(during, func(p point) []float64 { return p.signed })
	limited := growth(during, func(p point) []float64 { return p.limited })
	all1, all250 := peak(during, time.Second, -1), peak(during, 250*time.Millisecond, -1)
	busiest1, busiest250, busiest5, busiest := 0.0, 0.0, 0.0, 0
	for i := range r.servers {
		if v := peak(during, time.Second, i); v > busiest1 {
			busiest1, busiest = v, i
		}
		busiest250 = math.Max(busiest250, peak(during, 250*time.Millisecond, i))
		busiest5 = math.Max(busiest5, peak(during, 5*time.Second, i))
	}
	pass := true
	fmt.Fprintf(w, "| figure | value | against |\n|---|---|---|\n")
	converged := "**never**"
	if r.converged > 0 {
		converged = fmt.Sprintf("**%s**", r.converged.Round(10*time.Millisecond))
	} else {
		pass = false
	}
	fmt.Fprintf(w, "| every agent holds a leaf of the new root, from `trellis ca rotate` | %s | the window, %s |\n", converged, r.window)
	fmt.Fprintf(w, "| the fleet's watch names the new root | %s after | — |\n", r.rootSeen.Round(time.Millisecond))
	if r.converged > 0 {
		fmt.Fprintf(w, "| every agent holds a leaf of the new root, from the fleet's watch naming it | %s | the window, %s (+ the last signature's latency and this 250 ms poll) |\n",
			(r.converged - r.rootSeen).Round(10*time.Millisecond), r.window)
	}
	if r.statusErrs > 0 {
		fmt.Fprintf(w, "| reads of the sim's status that failed (every 250 ms) | %d | — |\n", r.statusErrs)
	}
	fmt.Fprintf(w, "| signatures by the servers during the rotation | %s | %d agents |\n", thousands(total), r.agents)
	fmt.Fprintf(w, "| peak rate over any 1 s, all %d servers · the busiest (server%d) | %s/s · **%s/s** | %s/s per server |\n",
		r.servers, busiest, thousands(all1), thousands(busiest1), thousands(r.limit))
	fmt.Fprintf(w, "| peak rate over any 250 ms, all servers · the busiest | %s/s · %s/s | (a bucket holds 1 s of tokens) |\n",
		thousands(all250), thousands(busiest250))
	fmt.Fprintf(w, "| peak rate over any 5 s, the busiest server | %s/s | %s/s (+ one second's burst: %s/s) |\n",
		thousands(busiest5), thousands(r.limit), thousands(r.limit*6/5))
	fmt.Fprintf(w, "| mean rate over the window, all servers | %s/s | %d agents / %s |\n",
		thousands((at(during, r.start.Add(r.window))-at(during, r.start))/r.window.Seconds()), r.agents, r.window)
	fmt.Fprintf(w, "| rate-limited answers (ResourceExhausted) | %s | — |\n", thousands(limited))
	verified := fmt.Sprintf("%d verified", r.verified)
	if r.verifyErr != nil {
		verified = fmt.Sprintf("**failed: %v**", r.verifyErr)
		pass = false
	}
	fmt.Fprintf(w, "| sampled agent leaves, verified against the new root alone and the old root alone | %s | every %dth agent |\n\n", verified, b.verifyEvery)
	// A token bucket lets a server sign up to one second's tokens at
	// once on top of its rate: over any 1 s at most twice the limit.
	if busiest1 > 2*r.limit {
		fmt.Fprintf(w, "**A server signed more than its limit allows (%s/s over 1 s, limit %s/s and one second's burst).**\n\n", thousands(busiest1), thousands(r.limit))
		pass = false
	}

	secs := int(math.Ceil(r.window.Seconds()))
	if r.converged > r.window {
		secs = int(math.Ceil(r.converged.Seconds()))
	}
	hist := perSecond(during, r.start, secs)
	top := 0.0
	for _, v := range hist {
		top = math.Max(top, v)
	}
	fmt.Fprintf(w, "Signatures per second from the rotation, all servers (each `#` ≈ %s):\n\n```\n", thousands(math.Max(top/50, 1)))
	for k, v := range hist {
		bar := 0
		if top > 0 {
			bar = int(math.Round(v / math.Max(top/50, 1)))
		}
		fmt.Fprintf(w, "%3d s %6s %s\n", k, thousands(v), strings.Repeat("#", bar))
	}
	fmt.Fprintf(w, "```\n\n")
	return pass
}

// thousands formats v rounded, with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", math.Round(v))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
