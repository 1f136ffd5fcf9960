package ca

import (
	"testing"
	"time"
)

var s0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return s0.Add(d) }

func TestNextSignAt(t *testing.T) {
	signed := LeafSigned(s0, at(100*time.Hour), "root-a", 0.5) // renews at 75h
	tests := []struct {
		name string
		s    LeafSchedule
		want time.Time
	}{
		{"not signed yet: at once", LeafSchedule{}, time.Time{}},
		{"not signed, failed: at the retry", LeafSchedule{RetryAt: at(time.Minute)}, at(time.Minute)},
		{"signed: at its renewal", signed, at(75 * time.Hour)},
		{"a root change sooner than the renewal wins", func() LeafSchedule { s := signed; s.ResignAt = at(time.Hour); return s }(), at(time.Hour)},
		{"a renewal sooner than the re-signing wins", func() LeafSchedule { s := signed; s.ResignAt = at(80 * time.Hour); return s }(), at(75 * time.Hour)},
		{"never before a retry", func() LeafSchedule { s := signed; s.ResignAt = at(time.Hour); s.RetryAt = at(2 * time.Hour); return s }(), at(2 * time.Hour)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NextSignAt(tc.s); !got.Equal(tc.want) {
				t.Fatalf("NextSignAt = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLeafSignedRenewsBetween60And90Percent(t *testing.T) {
	for _, r := range []float64{0, 0.25, 0.999999, 1, -1, 2} {
		s := LeafSigned(s0, at(72*time.Hour), "x", r)
		if s.RenewAt.Before(at(72*time.Hour*6/10)) || s.RenewAt.After(at(72*time.Hour*9/10)) {
			t.Errorf("r=%v: renews at %v, outside 60-90 %% of 72h", r, s.RenewAt.Sub(s0))
		}
	}
}

func TestOnRootChange(t *testing.T) {
	signed := LeafSigned(s0, at(72*time.Hour), "root-a", 0)
	now := at(time.Hour)
	tests := []struct {
		name   string
		s      LeafSchedule
		active string
		want   time.Time // ResignAt
	}{
		{"a leaf of another root is re-signed within the window", signed, "root-b", now.Add(15 * time.Second)},
		{"a leaf of the active root stays", signed, "root-a", time.Time{}},
		{"no active root named: nothing", signed, "", time.Time{}},
		{"a leaf not signed yet: nothing to re-sign", LeafSchedule{}, "root-b", time.Time{}},
		{"a leaf of unknown root is re-signed", LeafSigned(s0, at(72*time.Hour), "", 0), "root-b", now.Add(15 * time.Second)},
		{"a planned re-signing is kept", func() LeafSchedule { s := signed; s.ResignAt = at(time.Minute); return s }(), "root-b", at(time.Minute)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := OnRootChange(tc.s, tc.active, now, 30*time.Second, 0.5)
			if !got.ResignAt.Equal(tc.want) {
				t.Fatalf("ResignAt = %v, want %v", got.ResignAt, tc.want)
			}
		})
	}
}

func TestSignRetryDelay(t *testing.T) {
	tests := []struct {
		failures   int
		retryAfter time.Duration
		r          float64
		want       time.Duration
	}{
		{1, 0, 1, time.Second},
		{1, 0, 0, 500 * time.Millisecond},
		{2, 0, 1, 2 * time.Second},
		{4, 0, 1, 8 * time.Second},
		{100, 0, 1, SignRetryMax},
		{100, 0, 0, SignRetryMax / 2},
		{1, 5 * time.Second, 1, 5 * time.Second},   // the server's retry-after is a floor
		{3, 2 * time.Second, 1, 4 * time.Second},   // the backoff is longer
		{1, 10 * time.Minute, 0, 10 * time.Minute}, // even above SignRetryMax
	}
	for _, tc := range tests {
		if got := SignRetryDelay(tc.failures, tc.retryAfter, tc.r); got != tc.want {
			t.Errorf("SignRetryDelay(%d, %v, %v) = %v, want %v", tc.failures, tc.retryAfter, tc.r, got, tc.want)
		}
	}
}

func TestFailedCountsAndClearsOnSign(t *testing.T) {
	s := SignFailed(LeafSchedule{}, s0, 3*time.Second, 1)
	s = SignFailed(s, at(3*time.Second), 0, 1)
	if s.Failures != 2 || !s.RetryAt.Equal(at(5*time.Second)) {
		t.Fatalf("after two failures: %+v", s)
	}
	if SignDue(s, at(4*time.Second)) || !SignDue(s, at(5*time.Second)) {
		t.Fatal("due before its retry, or not at it")
	}
	if n := LeafSigned(s0, at(time.Hour), "r", 0); n.Failures != 0 || !n.RetryAt.IsZero() {
		t.Fatalf("a signed leaf keeps its failures: %+v", n)
	}
}
