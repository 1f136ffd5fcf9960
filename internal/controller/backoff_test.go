package controller

import (
	"testing"
	"time"
)

func TestBackoffCeilingGrowsAndCaps(t *testing.T) {
	b := Backoff{Base: 10 * time.Millisecond, Max: time.Second}
	cases := []struct {
		failures int
		want     time.Duration
	}{
		{0, 10 * time.Millisecond}, // treated as the first failure
		{1, 10 * time.Millisecond},
		{2, 20 * time.Millisecond},
		{3, 40 * time.Millisecond},
		{4, 80 * time.Millisecond},
		{7, 640 * time.Millisecond},
		{8, time.Second}, // 1.28s capped
		{9, time.Second},
		{64, time.Second},   // no overflow
		{1000, time.Second}, // no overflow
	}
	for _, c := range cases {
		if got := b.ceiling(c.failures); got != c.want {
			t.Errorf("ceiling(%d) = %s, want %s", c.failures, got, c.want)
		}
	}
}

func TestBackoffCapNotAPowerOfTwoOfBase(t *testing.T) {
	b := Backoff{Base: 3 * time.Second, Max: 10 * time.Second}
	want := []time.Duration{3 * time.Second, 6 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := b.ceiling(i + 1); got != w {
			t.Errorf("ceiling(%d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestBackoffJitterBounds(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Max: 10 * time.Second}
	cases := []struct {
		name     string
		failures int
		r        float64
		want     time.Duration
	}{
		{"lowest draw is half the ceiling", 1, 0, 50 * time.Millisecond},
		{"middle draw", 1, 0.5, 75 * time.Millisecond},
		{"lowest draw, third failure", 3, 0, 200 * time.Millisecond},
		{"middle draw, third failure", 3, 0.5, 300 * time.Millisecond},
		{"lowest draw at the cap", 20, 0, 5 * time.Second},
		{"negative draw is clamped to 0", 2, -3, 100 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := b.Delay(c.failures, c.r); got != c.want {
				t.Errorf("delay(%d, %v) = %s, want %s", c.failures, c.r, got, c.want)
			}
		})
	}
	// Every draw in [0, 1), and out-of-range ones, stays in [ceiling/2, ceiling).
	for failures := 1; failures <= 12; failures++ {
		ceiling := b.ceiling(failures)
		for _, r := range []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999999999, 1, 7} {
			d := b.Delay(failures, r)
			if d < ceiling/2 || d >= ceiling {
				t.Errorf("delay(%d, %v) = %s, outside [%s, %s)", failures, r, d, ceiling/2, ceiling)
			}
		}
	}
}
