package heartbeat

import (
	"slices"
	"time"
)

// The servers must tell their own lateness from an agent's absence: a
// leader that is busy, starved of CPU or fresh from an election hears
// heartbeats late, or not at all for a while, although every agent sent
// them on time. Marking those instances down would lose their tasks and
// place them again, which makes the cluster busier still. So the leader
// judges an instance by a deadline that grows with what it knows of its
// own lateness (JudgeLate), from three facts it measures itself:
//
//   - the time a heartbeat waited on a follower before it was forwarded
//     (ForwardHeartbeatsRequest.waited): the heartbeat counts as heard
//     when a server first had it, not when the leader took it;
//   - the time this process could not run (stallMeter): a ticker that
//     fires late measures CPU starvation, a stop-the-world pause or a
//     stopped process; every such second since an instance was last heard
//     is added to its deadline;
//   - the fleet's silence (FleetLateness): agents heartbeat every quarter
//     to third of the TTL, so at any moment half of the instances were
//     heard within a seventh of it. When the median instance has been
//     silent longer than a sixth of the TTL, it is not that instance that
//     is late but the servers (or the whole fleet: a starved host running
//     many agents); the excess is added to every deadline, up to
//     MaxFleetLatenessFactor TTLs. One dead instance among a heartbeating
//     fleet is marked down a TTL after its last heartbeat; a whole fleet
//     gone silent at once, which is the servers' trouble far more often
//     than the fleet's, is given up to that many TTLs more (Kubernetes'
//     node controller likewise stops evicting when every node is
//     unreachable at once);
//   - the start of its term: a new leader gives every instance at least
//     FailoverTTL from the moment it took over (Nomad gives 5 minutes),
//     enough for a fleet that was talking to the old leader to find it.

// Lateness is what the leader knows of its own lateness when it judges an
// instance.
type Lateness struct {
	// TermStart is when this server took over as leader, and FailoverTTL
	// how long every instance has from then at least.
	TermStart   time.Time
	FailoverTTL time.Duration
	// Stalled is how long the leader could not run since the instance was
	// last heard.
	Stalled time.Duration
	// Fleet is how late the fleet's heartbeats are as a whole now
	// (FleetLateness).
	Fleet time.Duration
}

// JudgeLate is Judge with the leader's own lateness allowed for: the
// deadline is a TTL after lastHeard plus the time the leader stalled
// since, and never before the term's start plus the failover TTL.
func JudgeLate(lastHeard, now time.Time, ttl time.Duration, l Lateness) Liveness {
	deadline := lastHeard.Add(ttl + max(l.Stalled, l.Fleet, 0))
	if grace := l.TermStart.Add(l.FailoverTTL); !l.TermStart.IsZero() && grace.After(deadline) {
		deadline = grace
	}
	return Liveness{Expired: !now.Before(deadline), Deadline: deadline}
}

// Limits of FleetLateness.
const (
	// MinFleet is the fewest instances whose silence says anything of the
	// fleet's: below it, FleetLateness is zero.
	MinFleet = 10
	// MaxFleetLatenessFactor bounds FleetLateness, in TTLs: a fleet
	// silent for longer is marked down even so.
	MaxFleetLatenessFactor = 6
	// fleetSample is how many instances' silences FleetLateness is
	// computed from at most, and fleetEvery how often it is computed.
	fleetSample = 1024
	fleetEvery  = time.Second
)

// FleetLateness is how late the fleet's heartbeats are as a whole, from
// how long each of (a sample of) the live instances has been silent: the
// median silence beyond a sixth of the TTL (a fleet heartbeating on time
// has a median near a seventh), at most MaxFleetLatenessFactor TTLs; zero
// for fewer than MinFleet instances.
func FleetLateness(silences []time.Duration, ttl time.Duration) time.Duration {
	if len(silences) < MinFleet {
		return 0
	}
	s := slices.Clone(silences)
	slices.Sort(s)
	median := s[len(s)/2]
	return min(max(median-ttl/6, 0), MaxFleetLatenessFactor*ttl)
}

// heardAt is when a heartbeat taken at now after waiting waited on a
// follower counts as heard: waited earlier, but never more than a TTL
// earlier (a follower's clock runs on its own machine), and never in the
// future.
func heardAt(now time.Time, waited, ttl time.Duration) time.Time {
	return now.Add(-min(max(waited, 0), ttl))
}

// stallInterval is how often the stall meter's ticker fires, and
// stallTolerance how late it may fire before the lateness counts: the
// scheduler's ordinary jitter is not a stall.
const (
	stallInterval  = 100 * time.Millisecond
	stallTolerance = 10 * time.Millisecond
)

// stallMeter adds up how late a periodic tick fired: the time the process
// could not run. It is fed the times the ticks fired (tick); total is
// monotonic, so the stall between two moments is the difference of the
// totals read at each.
type stallMeter struct {
	interval, tolerance time.Duration
	last                time.Time
	total               time.Duration
}

// tick records a tick that fired at now.
func (m *stallMeter) tick(now time.Time) {
	if !m.last.IsZero() {
		if late := now.Sub(m.last) - m.interval; late > m.tolerance {
			m.total += late
		}
	}
	m.last = now
}
