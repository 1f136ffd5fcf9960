package raft

import (
	"testing"
	"time"
)

func TestTuningScaled(t *testing.T) {
	d := DefaultTuning()
	got := d.Scaled(5)
	if got.HeartbeatTimeout != 5*time.Second || got.ElectionTimeout != 5*time.Second || got.LeaderLeaseTimeout != 2500*time.Millisecond {
		t.Fatalf("Scaled(5) = %+v", got)
	}
	if got.CommitTimeout != d.CommitTimeout || got.SnapshotThreshold != d.SnapshotThreshold {
		t.Fatalf("Scaled changed what it should not: %+v", got)
	}
	if d.Scaled(0) != d || d.Scaled(1) != d {
		t.Fatal("Scaled(0) and Scaled(1) must be the defaults")
	}
}
