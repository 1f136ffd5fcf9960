package raft

import (
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"
)

func TestTuningScaled(t *testing.T) {
	d := DefaultTuning()
	cases := []struct {
		m                          int
		heartbeat, election, lease time.Duration
	}{
		{0, 500 * time.Millisecond, 500 * time.Millisecond, 250 * time.Millisecond},
		{1, 500 * time.Millisecond, 500 * time.Millisecond, 250 * time.Millisecond},
		{2, time.Second, time.Second, 500 * time.Millisecond},
		{5, 2500 * time.Millisecond, 2500 * time.Millisecond, 1250 * time.Millisecond},
		{MaxRaftMultiplier, 5 * time.Second, 5 * time.Second, 2500 * time.Millisecond},
	}
	for _, c := range cases {
		got := d.Scaled(c.m)
		if got.HeartbeatTimeout != c.heartbeat || got.ElectionTimeout != c.election || got.LeaderLeaseTimeout != c.lease {
			t.Errorf("Scaled(%d) = heartbeat %s, election %s, lease %s; want %s, %s, %s", c.m,
				got.HeartbeatTimeout, got.ElectionTimeout, got.LeaderLeaseTimeout, c.heartbeat, c.election, c.lease)
		}
		// Only failure detection scales.
		want := got
		want.HeartbeatTimeout, want.ElectionTimeout, want.LeaderLeaseTimeout = d.HeartbeatTimeout, d.ElectionTimeout, d.LeaderLeaseTimeout
		if want != d {
			t.Errorf("Scaled(%d) changed what it should not: %+v", c.m, got)
		}
		// Every multiplier gives a configuration raft accepts.
		rc := hraft.DefaultConfig()
		rc.LocalID = "s1"
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout, rc.CommitTimeout = got.HeartbeatTimeout, got.ElectionTimeout, got.LeaderLeaseTimeout, got.CommitTimeout
		if err := hraft.ValidateConfig(rc); err != nil {
			t.Errorf("Scaled(%d): raft refuses it: %v", c.m, err)
		}
	}
}
