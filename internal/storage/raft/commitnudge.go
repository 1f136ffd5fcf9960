package raft

import (
	"errors"
	"sync/atomic"
	"time"

	hraft "github.com/hashicorp/raft"
)

// Telling the followers of a commit at once.
//
// A follower applies an entry only once it knows the entry is committed,
// and it learns that from the commit index of the leader's next
// AppendEntries. hashicorp/raft sends one when an entry is appended, or
// CommitTimeout (50-100 ms, randomized) after the last; its heartbeats
// carry no commit index. So after the last write of a burst, whatever the
// followers serve from their own store (the catalog's reads and blocking
// queries, DNS, the agents' task streams) is 50-100 ms behind the leader.
// etcd's raft broadcasts an append whenever the leader's commit index
// advances; this is the same thing from outside the library: when a
// write the leader applied is still the last entry of its log
// Tuning.CommitNudge later, the leader appends a barrier (an entry the
// state machine never sees), whose AppendEntries carries the new commit
// index to every follower. A steady stream of writes needs no barrier:
// each write's append carries the commit of those before it.
type commitNudge struct {
	delay     time.Duration
	committed atomic.Uint64 // highest index of a write the leader applied
	kick      chan struct{}
	count     atomic.Uint64 // barriers appended
}

func newCommitNudge(delay time.Duration) *commitNudge {
	return &commitNudge{delay: delay, kick: make(chan struct{}, 1)}
}

// applied records that the write at index was committed and applied on
// the leader.
func (n *commitNudge) applied(index uint64) {
	for {
		cur := n.committed.Load()
		if index <= cur || n.committed.CompareAndSwap(cur, index) {
			break
		}
	}
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// needsNudge says whether the followers may not know of the last commit:
// nothing was appended after the last write the leader applied, so no
// AppendEntries has carried its commit yet (unless the CommitTimeout one
// happened to, which a barrier then only repeats).
func needsNudge(lastIndex, applied uint64) bool {
	return applied > 0 && lastIndex == applied
}

// runCommitNudge appends the barriers until the backend stops; one at a
// time, so a burst of kicks during a barrier costs one more at most.
func (b *Backend) runCommitNudge() {
	n := b.nudge
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-n.kick:
		}
		timer.Reset(n.delay)
		select {
		case <-b.stop:
			timer.Stop()
			return
		case <-timer.C:
		}
		if b.raft.State() != hraft.Leader || !needsNudge(b.raft.LastIndex(), n.committed.Load()) {
			continue
		}
		// A log write like any other: no restore may overlap it. Its
		// answer is awaited with the backend's stop: a barrier raft took
		// just before it shut down may never be answered, and Shutdown
		// waits for this goroutine.
		b.gate.RLock()
		f := b.raft.Barrier(0)
		answered := make(chan error, 1)
		go func() { answered <- f.Error() }()
		var err error
		select {
		case err = <-answered:
		case <-b.stop:
			b.gate.RUnlock()
			return
		}
		b.gate.RUnlock()
		if err != nil {
			if !errors.Is(err, hraft.ErrRaftShutdown) && !errors.Is(err, hraft.ErrNotLeader) &&
				!errors.Is(err, hraft.ErrLeadershipLost) {
				b.logger.Debug("commit nudge failed", "error", err)
			}
			continue
		}
		n.count.Add(1)
	}
}
