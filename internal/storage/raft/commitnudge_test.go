package raft

import (
	"testing"
	"time"

	"trellis.dev/trellis/internal/storage"
)

func TestNeedsNudge(t *testing.T) {
	for _, c := range []struct {
		last, applied uint64
		want          bool
	}{
		{last: 0, applied: 0, want: false},  // nothing written yet
		{last: 7, applied: 0, want: false},  // entries, but no write of ours applied
		{last: 7, applied: 7, want: true},   // the last entry is an applied write
		{last: 8, applied: 7, want: false},  // something came after it: its append carries the commit
		{last: 12, applied: 7, want: false}, // a burst still in flight
	} {
		if got := needsNudge(c.last, c.applied); got != c.want {
			t.Errorf("needsNudge(last %d, applied %d) = %v, want %v", c.last, c.applied, got, c.want)
		}
	}
}

// With a CommitTimeout of an hour, the leader sends no AppendEntries after
// the last write for an hour, so only the nudge's barrier can tell the
// followers that the write is committed: they apply it without a later
// write.
func TestFollowersApplyTheLastWriteOfABurst(t *testing.T) {
	tuning := testTuning()
	tuning.CommitTimeout = time.Hour
	nodes := startCluster(t, 3, false, tuning)
	leader := leaderOf(t, nodes)
	ctx := ctxT(t)
	for _, name := range []string{"a", "b"} {
		w := mustWrite(t, leader.b, testResource(name))
		for _, f := range followersOf(nodes, leader) {
			eventually(t, 20*time.Second, f.id+" applies "+name, func() bool {
				r, err := f.b.Read(ctx, storage.EventualConsistency, testID(name))
				return err == nil && r.GetVersion() == w.GetVersion()
			})
		}
	}
	if n := leader.b.nudge.count.Load(); n == 0 {
		t.Fatalf("the leader appended no barrier")
	}
}
