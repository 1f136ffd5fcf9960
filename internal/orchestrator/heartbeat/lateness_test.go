package heartbeat

import (
	"testing"
	"time"
)

var l0 = time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)

func TestJudgeLate(t *testing.T) {
	const ttl = 10 * time.Second
	for _, c := range []struct {
		name      string
		lastHeard time.Time
		now       time.Time
		late      Lateness
		deadline  time.Time
	}{
		{"no lateness: a TTL", l0, l0.Add(9 * time.Second), Lateness{}, l0.Add(ttl)},
		{"the leader stalled 4 s since: 4 s more", l0, l0.Add(12 * time.Second), Lateness{Stalled: 4 * time.Second}, l0.Add(14 * time.Second)},
		{"a negative stall counts for nothing", l0, l0, Lateness{Stalled: -time.Second}, l0.Add(ttl)},
		{"fresh term: the failover TTL from the takeover", l0, l0.Add(20 * time.Second),
			Lateness{TermStart: l0.Add(time.Second), FailoverTTL: 30 * time.Second}, l0.Add(31 * time.Second)},
		{"an old term: the TTL again", l0.Add(time.Minute), l0.Add(time.Minute),
			Lateness{TermStart: l0, FailoverTTL: 30 * time.Second}, l0.Add(time.Minute + ttl)},
		{"stall and term: the later deadline", l0, l0,
			Lateness{TermStart: l0, FailoverTTL: 12 * time.Second, Stalled: 5 * time.Second}, l0.Add(15 * time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := JudgeLate(c.lastHeard, c.now, ttl, c.late)
			if !got.Deadline.Equal(c.deadline) || got.Expired != !c.now.Before(c.deadline) {
				t.Fatalf("JudgeLate = %+v, want deadline %v", got, c.deadline)
			}
		})
	}
}

func TestHeardAt(t *testing.T) {
	const ttl = 10 * time.Second
	for _, c := range []struct {
		waited time.Duration
		want   time.Time
	}{
		{0, l0},
		{3 * time.Second, l0.Add(-3 * time.Second)},
		{time.Hour, l0.Add(-ttl)}, // a follower's clock cannot buy more than a TTL
		{-time.Second, l0},        // nor a heartbeat from the future
	} {
		if got := heardAt(l0, c.waited, ttl); !got.Equal(c.want) {
			t.Errorf("heardAt(waited %s) = %v, want %v", c.waited, got, c.want)
		}
	}
}

func TestStallMeter(t *testing.T) {
	m := stallMeter{interval: 100 * time.Millisecond, tolerance: 10 * time.Millisecond}
	at := l0
	for _, c := range []struct {
		gap   time.Duration
		total time.Duration
	}{
		{0, 0}, // the first tick only starts the count
		{100 * time.Millisecond, 0},
		{108 * time.Millisecond, 0}, // jitter within the tolerance
		{2100 * time.Millisecond, 2 * time.Second}, // starved for 2 s
		{100 * time.Millisecond, 2 * time.Second},
		{600 * time.Millisecond, 2500 * time.Millisecond},
	} {
		at = at.Add(c.gap)
		m.tick(at)
		if m.total != c.total {
			t.Fatalf("after a tick %s after the last: total %s, want %s", c.gap, m.total, c.total)
		}
	}
}

func TestFleetLateness(t *testing.T) {
	const ttl = 12 * time.Second
	same := func(n int, d time.Duration) []time.Duration {
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = d
		}
		return s
	}
	spread := func(n int, from, to time.Duration) []time.Duration {
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = from + (to-from)*time.Duration(i)/time.Duration(n-1)
		}
		return s
	}
	for _, c := range []struct {
		name     string
		silences []time.Duration
		want     time.Duration
	}{
		{"a fleet on time: silences up to between a quarter and a third of the TTL", spread(101, 0, 3500*time.Millisecond), 0},
		{"one dead instance among them changes nothing", append(spread(100, 0, 3500*time.Millisecond), time.Minute), 0},
		{"every heartbeat 5 s late: the median is 7 s", spread(101, 5*time.Second, 9*time.Second), 5 * time.Second},
		{"too few instances to say", same(MinFleet-1, time.Minute), 0},
		{"the whole fleet silent for an hour: at most 6 TTLs", same(50, time.Hour), MaxFleetLatenessFactor * ttl},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := FleetLateness(c.silences, ttl); got != c.want {
				t.Fatalf("FleetLateness = %s, want %s", got, c.want)
			}
		})
	}
}
