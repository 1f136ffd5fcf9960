package main

import (
	"slices"
	"testing"
	"time"
)

func TestRates(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	// Readings every 250 ms of two servers: server 0 signs 10 per
	// reading for the first second, then nothing; server 1 signs 40 in
	// the one reading at 1.5 s.
	var pts []point
	s0, s1 := 0.0, 0.0
	for k := 0; k <= 12; k++ {
		at := t0.Add(time.Duration(k) * 250 * time.Millisecond)
		if k >= 1 && k <= 4 {
			s0 += 10
		}
		if k == 6 {
			s1 += 40
		}
		pts = append(pts, point{at: at, signed: []float64{s0, s1}, limited: []float64{0, float64(k)}})
	}
	for _, tc := range []struct {
		w      time.Duration
		server int
		want   float64
	}{
		{time.Second, -1, 60},             // 0.5 s to 1.5 s: 20 of server 0 and 40 of server 1
		{250 * time.Millisecond, -1, 160}, // 40 in one reading
		{time.Second, 0, 40},
		{250 * time.Millisecond, 0, 40},
		{time.Second, 1, 40},
		{10 * time.Second, -1, 8},
	} {
		if got := peak(pts, tc.w, tc.server); got != tc.want {
			t.Errorf("peak(%s, server %d) = %g, want %g", tc.w, tc.server, got, tc.want)
		}
	}
	if got, want := perSecond(pts, t0, 4), []float64{40, 40, 0, 0}; !slices.Equal(got, want) {
		t.Errorf("perSecond = %v, want %v", got, want)
	}
	if got := at(pts, t0.Add(-time.Second)); got != 0 {
		t.Errorf("before the readings: %g", got)
	}
	if got := growth(pts, func(p point) []float64 { return p.limited }); got != 12 {
		t.Errorf("growth of limited = %g, want 12", got)
	}
	if got := growth(pts[:1], func(p point) []float64 { return p.signed }); got != 0 {
		t.Errorf("growth of one reading = %g", got)
	}
}
