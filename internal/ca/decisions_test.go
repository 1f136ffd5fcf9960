package ca

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"trellis.dev/trellis/internal/resource"
)

func TestRootsToPrune(t *testing.T) {
	ttl := 72 * time.Hour
	out := t0                   // when the old root was rotated out
	drained := out.Add(2 * ttl) // the first instant it may go
	far := t0.Add(10 * 365 * 24 * time.Hour)
	cases := []struct {
		name  string
		roots []RootState
		ttl   time.Duration
		now   time.Time
		want  []string
	}{
		{"active only", []RootState{{ID: "a", Active: true, NotAfter: far}}, ttl, drained, nil},
		{"just before 2 × leaf TTL", []RootState{{ID: "a", Active: true, NotAfter: far}, {ID: "old", RotatedOutAt: out, NotAfter: far}}, ttl, drained.Add(-time.Nanosecond), nil},
		{"at 2 × leaf TTL", []RootState{{ID: "a", Active: true, NotAfter: far}, {ID: "old", RotatedOutAt: out, NotAfter: far}}, ttl, drained, []string{"old"}},
		{"after 2 × leaf TTL", []RootState{{ID: "old", RotatedOutAt: out, NotAfter: far}, {ID: "a", Active: true, NotAfter: far}}, ttl, drained.Add(time.Hour), []string{"old"}},
		{"active and expired is kept", []RootState{{ID: "a", Active: true, NotAfter: t0}}, ttl, t0.Add(time.Hour), nil},
		{"active with a rotated-out time is kept", []RootState{{ID: "a", Active: true, RotatedOutAt: out, NotAfter: far}}, ttl, drained, nil},
		{"expired before draining", []RootState{{ID: "old", RotatedOutAt: out, NotAfter: out.Add(time.Hour)}}, ttl, out.Add(time.Hour), []string{"old"}},
		{"just before expiry", []RootState{{ID: "old", RotatedOutAt: out, NotAfter: out.Add(time.Hour)}}, ttl, out.Add(time.Hour - time.Nanosecond), nil},
		{"no rotated-out time: expiry alone", []RootState{{ID: "old", NotAfter: far}}, ttl, drained.Add(1000 * time.Hour), nil},
		{"no rotated-out time, expired", []RootState{{ID: "old", NotAfter: far}}, ttl, far, []string{"old"}},
		{"no leaf TTL: expiry alone", []RootState{{ID: "old", RotatedOutAt: out, NotAfter: far}}, 0, drained.Add(1000 * time.Hour), nil},
		{"the root's longer leaf TTL: not yet", []RootState{{ID: "old", RotatedOutAt: out, NotAfter: far, LeafTTL: 2 * ttl}}, ttl, drained, nil},
		{"the root's longer leaf TTL: drained", []RootState{{ID: "old", RotatedOutAt: out, NotAfter: far, LeafTTL: 2 * ttl}}, ttl, out.Add(4 * ttl), []string{"old"}},
		{"the root's leaf TTL alone", []RootState{{ID: "old", RotatedOutAt: out, NotAfter: far, LeafTTL: ttl}}, 0, drained, []string{"old"}},
		{"two old, one drained", []RootState{
			{ID: "older", RotatedOutAt: out.Add(-24 * time.Hour), NotAfter: far},
			{ID: "old", RotatedOutAt: out.Add(time.Hour), NotAfter: far},
			{ID: "a", Active: true, NotAfter: far},
		}, ttl, drained, []string{"older"}},
		{"none", nil, ttl, drained, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := RootsToPrune(c.roots, c.ttl, c.now); !slices.Equal(got, c.want) {
				t.Fatalf("RootsToPrune = %v, want %v", got, c.want)
			}
		})
	}
}

// The active root is never pruned, whatever the dates and TTL.
func TestRootsToPruneNeverActive(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 6).Draw(t, "n")
		var roots []RootState
		for i := range n {
			r := RootState{ID: string(rune('a' + i)), Active: rapid.Bool().Draw(t, "active")}
			if rapid.Bool().Draw(t, "rotated") {
				r.RotatedOutAt = t0.Add(time.Duration(rapid.Int64Range(-1e15, 1e15).Draw(t, "out")))
			}
			r.NotAfter = t0.Add(time.Duration(rapid.Int64Range(-1e15, 1e15).Draw(t, "notAfter")))
			roots = append(roots, r)
		}
		ttl := time.Duration(rapid.Int64Range(-1e12, 1e15).Draw(t, "ttl"))
		now := t0.Add(time.Duration(rapid.Int64Range(-1e15, 1e15).Draw(t, "now")))
		for _, id := range RootsToPrune(roots, ttl, now) {
			for _, r := range roots {
				if r.ID == id && r.Active {
					t.Fatalf("pruned the active root %s", id)
				}
			}
		}
	})
}

func TestRenewAt(t *testing.T) {
	cases := []struct {
		nb, na, want time.Time
	}{
		{t0, t0.Add(365 * 24 * time.Hour), t0.Add(365 * 12 * time.Hour)},
		{t0, t0.Add(3 * time.Second), t0.Add(1500 * time.Millisecond)},
		{t0, t0, t0},                 // no life: renew now
		{t0, t0.Add(-time.Hour), t0}, // backwards: renew now
	}
	for _, c := range cases {
		if got := RenewAt(c.nb, c.na); !got.Equal(c.want) {
			t.Errorf("RenewAt(%v, %v) = %v, want %v", c.nb, c.na, got, c.want)
		}
	}
}

func TestLeafRenewAt(t *testing.T) {
	nb, na := t0, t0.Add(100*time.Hour)
	cases := []struct {
		r    float64
		want time.Time
	}{
		{0, t0.Add(60 * time.Hour)},
		{0.5, t0.Add(75 * time.Hour)},
		{1, t0.Add(90 * time.Hour)},
		{-3, t0.Add(60 * time.Hour)},         // clamped
		{7, t0.Add(90 * time.Hour)},          // clamped
		{math.NaN(), t0.Add(60 * time.Hour)}, // treated as 0
	}
	for _, c := range cases {
		if got := LeafRenewAt(nb, na, c.r); !got.Equal(c.want) {
			t.Errorf("LeafRenewAt(r=%v) = %v, want %v", c.r, got.Sub(t0), c.want.Sub(t0))
		}
	}
	// r just below 1, as rand.Float64 can return, stays below 90 %.
	if got := LeafRenewAt(nb, na, math.Nextafter(1, 0)); !got.Before(t0.Add(90*time.Hour)) || got.Before(t0.Add(89*time.Hour)) {
		t.Errorf("LeafRenewAt(r→1) = %v", got.Sub(t0))
	}
	if got := LeafRenewAt(t0, t0, 0.5); !got.Equal(t0) {
		t.Errorf("a leaf with no life: %v", got)
	}
	rapid.Check(t, func(t *rapid.T) {
		life := time.Duration(rapid.Int64Range(1, 1e16).Draw(t, "life"))
		r := rapid.Float64Range(0, 1).Draw(t, "r")
		got := LeafRenewAt(t0, t0.Add(life), r).Sub(t0)
		lo, hi := time.Duration(float64(life)*0.6), time.Duration(float64(life)*0.9)
		if got < lo-1 || got > hi+1 {
			t.Fatalf("renew at %v of a %v life, outside [%v, %v]", got, life, lo, hi)
		}
	})
}

func TestResignDelay(t *testing.T) {
	w := 10 * time.Minute
	cases := []struct {
		window time.Duration
		r      float64
		want   time.Duration
	}{
		{w, 0, 0},
		{w, 0.25, 150 * time.Second},
		{w, 1, w},
		{w, -1, 0},
		{w, 2, w},
		{0, 0.5, 0},
		{-w, 0.5, 0},
	}
	for _, c := range cases {
		if got := ResignDelay(c.window, c.r); got != c.want {
			t.Errorf("ResignDelay(%v, %v) = %v, want %v", c.window, c.r, got, c.want)
		}
	}
	if got := ResignDelay(w, math.Nextafter(1, 0)); got >= w || got < w-time.Millisecond {
		t.Errorf("ResignDelay(r→1) = %v", got)
	}
}

func TestCheckLeafTTL(t *testing.T) {
	rootEnd := t0.Add(30 * 24 * time.Hour)
	cases := []struct {
		name string
		ttl  time.Duration
		now  time.Time
		says string // "" when accepted
	}{
		{"default", DefaultLeafTTL, t0, ""},
		{"the minimum", time.Hour, t0, ""},
		{"up to the root's end", 30 * 24 * time.Hour, t0, ""},
		{"under an hour", time.Hour - time.Second, t0, "under the minimum"},
		{"zero", 0, t0, "under the minimum"},
		{"beyond the root", 30*24*time.Hour + time.Second, t0, "outlives the active root"},
		{"root nearly expired", DefaultLeafTTL, rootEnd.Add(-time.Hour), "outlives the active root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckLeafTTL(c.ttl, rootEnd, c.now)
			if c.says == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *resource.FieldError
			if !errors.As(err, &fe) || fe.Field != "leaf_ttl" || !strings.Contains(fe.Reason, c.says) {
				t.Fatalf("CheckLeafTTL = %v, want leaf_ttl saying %q", err, c.says)
			}
		})
	}
}
