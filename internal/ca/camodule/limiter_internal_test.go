package camodule

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/ca"
)

var t0 = time.Date(2026, 11, 25, 7, 0, 0, 0, time.UTC)

// The bucket, step by step: full at first (one second's worth), spent one
// token a call, refilled at the rate, never above its capacity, and a
// wait that says when the next token is there.
func TestBucketTake(t *testing.T) {
	type step struct {
		at   time.Duration // after t0
		ok   bool
		wait time.Duration // when refused
	}
	tests := []struct {
		name  string
		rate  float64
		steps []step
	}{
		{name: "two a second", rate: 2, steps: []step{
			{at: 0, ok: true}, {at: 0, ok: true},
			{at: 0, wait: 500 * time.Millisecond},
			{at: 250 * time.Millisecond, wait: 250 * time.Millisecond},
			{at: 500 * time.Millisecond, ok: true},
			{at: 500 * time.Millisecond, wait: 500 * time.Millisecond},
		}},
		{name: "refills up to its capacity only", rate: 2, steps: []step{
			{at: 0, ok: true},
			{at: time.Hour, ok: true}, {at: time.Hour, ok: true},
			{at: time.Hour, wait: 500 * time.Millisecond},
		}},
		{name: "below one a second holds one token", rate: 0.5, steps: []step{
			{at: 0, ok: true},
			{at: 0, wait: 2 * time.Second},
			{at: time.Second, wait: time.Second},
			{at: 2 * time.Second, ok: true},
		}},
		{name: "a clock that steps back refills nothing", rate: 1, steps: []step{
			{at: time.Second, ok: true},
			{at: 0, wait: time.Second},
			{at: 2 * time.Second, ok: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bucket
			for i, s := range tt.steps {
				var ok bool
				var wait time.Duration
				b, wait, ok = b.take(t0.Add(s.at), tt.rate)
				if ok != s.ok || (!ok && wait != s.wait) {
					t.Fatalf("step %d at %v: ok %v wait %v, want ok %v wait %v", i, s.at, ok, wait, s.ok, s.wait)
				}
			}
		})
	}
}

func TestRetryAfterIsWholeSeconds(t *testing.T) {
	for _, tt := range []struct{ wait, want time.Duration }{
		{0, time.Second},
		{time.Microsecond, time.Second},
		{time.Second, time.Second},
		{1001 * time.Millisecond, 2 * time.Second},
		{90 * time.Second, 90 * time.Second},
	} {
		if got := retryAfter(tt.wait); got != tt.want {
			t.Errorf("retryAfter(%v) = %v, want %v", tt.wait, got, tt.want)
		}
	}
}

// The limiter refuses over the rate and over the concurrency, each with
// its own label and a retry-after, never waits, and takes new limits at
// once. Zeros are the defaults, which are high.
func TestLimiter(t *testing.T) {
	if got := NewLimiter(Limits{}).Limits(); got.PerSecond != ca.DefaultCSRMaxPerSecond || got.Concurrent != ca.DefaultCSRMaxConcurrent {
		t.Fatalf("default limits = %+v", got)
	}
	if ca.DefaultCSRMaxPerSecond < 5000 || ca.DefaultCSRMaxConcurrent < 16 {
		t.Fatalf("defaults %v/s and %d at once: this CA must never be the bottleneck", float64(ca.DefaultCSRMaxPerSecond), ca.DefaultCSRMaxConcurrent)
	}
	l := NewLimiter(Limits{PerSecond: 3, Concurrent: 2})
	r1, err := l.Acquire(t0)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := l.Acquire(t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire(t0)
	var rl *RateLimitedError
	if !errors.As(err, &rl) || rl.Limit != LimitConcurrency || rl.RetryAfter != time.Second {
		t.Fatalf("third at once = %v, want refused by the concurrency", err)
	}
	if status.Code(err) != codes.ResourceExhausted || rl.RetryAfterSeconds() != "1" {
		t.Errorf("refusal = %v (%s), want ResourceExhausted with retry-after 1", status.Code(err), rl.RetryAfterSeconds())
	}
	r1()
	r1() // twice is once
	r3, err := l.Acquire(t0)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	r2()
	r3()
	// Three tokens a second: the three above spent them.
	_, err = l.Acquire(t0.Add(100 * time.Millisecond))
	if !errors.As(err, &rl) || rl.Limit != LimitRate || rl.RetryAfter != time.Second {
		t.Fatalf("fourth in a second = %v, want refused by the rate", err)
	}
	r4, err := l.Acquire(t0.Add(time.Second))
	if err != nil {
		t.Fatalf("a second later: %v", err)
	}
	r4()
	// A lower rate applies at once: the bucket keeps one token at most,
	// then a token every 10 s, and a retry-after that says so.
	l.SetLimits(Limits{PerSecond: 0.1, Concurrent: 2})
	r5, err := l.Acquire(t0.Add(time.Second))
	if err != nil {
		t.Fatalf("the one token left: %v", err)
	}
	r5()
	if _, err := l.Acquire(t0.Add(time.Second)); !errors.As(err, &rl) || rl.Limit != LimitRate || rl.RetryAfter != 10*time.Second {
		t.Fatalf("after lowering the rate: %v, want a retry-after of 10s", err)
	}
}
