package main

import (
	"time"
)

// point is one reading of the servers' counters: each server's
// signatures and rate-limited answers so far, at a time.
type point struct {
	at      time.Time
	signed  []float64 // by server
	limited []float64 // by server
}

func sum(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s
}

// peak is the most signatures counted within any span of at most w
// between two readings, over all servers together (server -1) or one
// server (its index), as a rate per second of w. Readings are in time
// order.
func peak(pts []point, w time.Duration, server int) float64 {
	val := func(p point) float64 {
		if server < 0 {
			return sum(p.signed)
		}
		return p.signed[server]
	}
	best := 0.0
	j := 0
	for i := range pts {
		if j < i {
			j = i
		}
		for j+1 < len(pts) && pts[j+1].at.Sub(pts[i].at) <= w {
			j++
		}
		if d := val(pts[j]) - val(pts[i]); d > best {
			best = d
		}
	}
	return best / w.Seconds()
}

// at is the servers' total signatures at t: the last reading at or before
// it (the first reading when t is before them all).
func at(pts []point, t time.Time) float64 {
	v := 0.0
	for i, p := range pts {
		if p.at.After(t) {
			if i == 0 {
				return sum(p.signed)
			}
			break
		}
		v = sum(p.signed)
	}
	return v
}

// perSecond is the servers' signatures in each whole second from start
// for n seconds: the histogram of a rotation's re-signing.
func perSecond(pts []point, start time.Time, n int) []float64 {
	out := make([]float64, n)
	for k := range n {
		out[k] = at(pts, start.Add(time.Duration(k+1)*time.Second)) - at(pts, start.Add(time.Duration(k)*time.Second))
	}
	return out
}

// total is the growth of a counter of the readings between the first and
// the last.
func growth(pts []point, counter func(point) []float64) float64 {
	if len(pts) < 2 {
		return 0
	}
	return sum(counter(pts[len(pts)-1])) - sum(counter(pts[0]))
}
