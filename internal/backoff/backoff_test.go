package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestCeilingGrowsAndCaps(t *testing.T) {
	p := Policy{Base: 10 * time.Millisecond, Max: time.Second}
	cases := []struct {
		failures int
		want     time.Duration
	}{
		{-1, 10 * time.Millisecond}, // treated as the first failure
		{0, 10 * time.Millisecond},
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
		if got := p.Ceiling(c.failures); got != c.want {
			t.Errorf("Ceiling(%d) = %s, want %s", c.failures, got, c.want)
		}
	}
}

func TestCeilingCapNotAPowerOfTwoOfBase(t *testing.T) {
	p := Policy{Base: 3 * time.Second, Max: 10 * time.Second}
	want := []time.Duration{3 * time.Second, 6 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := p.Ceiling(i + 1); got != w {
			t.Errorf("Ceiling(%d) = %s, want %s", i+1, got, w)
		}
	}
}

func TestDelayJitterBounds(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second}
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
			if got := p.Delay(c.failures, c.r); got != c.want {
				t.Errorf("Delay(%d, %v) = %s, want %s", c.failures, c.r, got, c.want)
			}
		})
	}
	// Every draw in [0, 1), and out-of-range ones, stays in [ceiling/2, ceiling).
	for failures := 1; failures <= 12; failures++ {
		ceiling := p.Ceiling(failures)
		for _, r := range []float64{0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999999999, 1, 7} {
			d := p.Delay(failures, r)
			if d < ceiling/2 || d >= ceiling {
				t.Errorf("Delay(%d, %v) = %s, outside [%s, %s)", failures, r, d, ceiling/2, ceiling)
			}
		}
	}
}

func TestWaiterNext(t *testing.T) {
	p := Policy{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	cases := []struct {
		name string
		rand func() float64
		want []time.Duration
	}{
		{"no jitter waits the ceiling", nil,
			[]time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}},
		{"jitter drawn from Rand", func() float64 { return 0 },
			[]time.Duration{2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := Waiter{Policy: p, Rand: c.rand}
			for i, want := range c.want {
				if got := w.Next(); got != want {
					t.Errorf("Next() #%d = %s, want %s", i+1, got, want)
				}
			}
			if w.Failures() != len(c.want) {
				t.Errorf("Failures() = %d, want %d", w.Failures(), len(c.want))
			}
			w.Reset()
			if got := w.Next(); got != c.want[0] {
				t.Errorf("Next() after Reset = %s, want %s", got, c.want[0])
			}
		})
	}
}

func TestWaiterWaitSleepsTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := Waiter{Policy: Policy{Base: time.Second, Max: time.Minute}}
		start := time.Now()
		if !w.Wait(context.Background()) {
			t.Fatal("Wait returned false with a live context")
		}
		if !w.Wait(context.Background()) {
			t.Fatal("Wait returned false with a live context")
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Errorf("two waits took %s, want 1s + 2s", got)
		}
	})
}

func TestWaiterWaitEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := Waiter{Policy: Policy{Base: time.Minute, Max: time.Hour}}
		start := time.Now()
		if w.Wait(ctx) {
			t.Fatal("Wait returned true after its context ended")
		}
		if got := time.Since(start); got != 10*time.Second {
			t.Errorf("Wait returned after %s, want when the context ended (10s)", got)
		}
	})
}
