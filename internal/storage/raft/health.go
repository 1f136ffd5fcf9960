package raft

import (
	"fmt"
	"time"
)

// Health is whether this server's answers can be trusted, and why not.
type Health struct {
	OK     bool
	Reason string // why not; empty when OK
	// Leader is the leader's id, empty when none is known.
	Leader string
	// LastContact is how long ago this server last heard from the leader
	// (0 on the leader).
	LastContact time.Duration
	// Applied is this server's applied index; LeaderIndex the leader's
	// read index when it was last asked.
	Applied, LeaderIndex uint64
}

// healthInput is what judgeHealth decides on.
type healthInput struct {
	isLeader, leaderReady bool
	leader                string // id; "" when none is known
	neverContacted        bool
	lastContact           time.Duration
	contactBound          time.Duration
	caughtUp              bool  // since the start
	behind                bool  // the last round's index was not applied in time
	roundErr              error // the last round failed
	roundAge              time.Duration
	applied, asked        uint64 // applied index; the last round's leader index
}

// judgeHealth decides a server's health: good on a leader that has caught
// up; on a follower, only while it hears from a leader, has caught up
// since its start, and applied, in time, what the leader had committed
// when last asked (asked recently).
func judgeHealth(in healthInput) (bool, string) {
	switch {
	case in.isLeader && in.leaderReady:
		return true, ""
	case in.isLeader:
		return false, "this server was just elected leader and is applying what earlier leaders committed"
	case in.leader == "":
		return false, "no cluster leader"
	case in.neverContacted:
		return false, fmt.Sprintf("no contact with the leader %s since this server started", in.leader)
	case in.lastContact > in.contactBound:
		return false, fmt.Sprintf("no contact with the leader %s for %s", in.leader, in.lastContact.Round(time.Millisecond))
	case !in.caughtUp:
		return false, fmt.Sprintf("catching up with the leader since this server started (applied index %d)", in.applied)
	case in.roundErr != nil && in.roundAge > 3*catchUpInterval:
		return false, fmt.Sprintf("cannot ask the leader how far it is: %v", in.roundErr)
	case in.behind && in.applied < in.asked:
		return false, fmt.Sprintf("behind the leader: applied index %d of %d", in.applied, in.asked)
	}
	return true, ""
}

// Health reports whether this server is healthy: see judgeHealth.
func (b *Backend) Health() Health {
	leader, _ := b.Leader()
	c := b.catch
	c.mu.Lock()
	asked, answered, behind, roundErr := c.asked, c.answered, c.behind, c.err
	c.mu.Unlock()
	in := healthInput{
		isLeader:     b.IsLeader(),
		leader:       leader,
		contactBound: b.tuning.HeartbeatTimeout,
		caughtUp:     c.caughtUp.Load(),
		behind:       behind,
		roundErr:     roundErr,
		applied:      b.fsm.applied.Load(),
		asked:        asked,
	}
	if !answered.IsZero() {
		in.roundAge = time.Since(answered)
	}
	if in.isLeader {
		in.leaderReady = b.lead.readyIn(b.raft.CurrentTerm())
	} else if lc := b.raft.LastContact(); !lc.IsZero() {
		in.lastContact = time.Since(lc)
	} else {
		in.neverContacted = true
	}
	ok, reason := judgeHealth(in)
	h := Health{OK: ok, Reason: reason, Leader: leader, Applied: in.applied, LeaderIndex: asked}
	if !in.isLeader {
		h.LastContact = in.lastContact
	}
	return h
}
