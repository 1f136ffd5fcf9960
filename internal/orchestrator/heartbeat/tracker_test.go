package heartbeat_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/orchestrator/heartbeat"
)

func TestInactiveTrackerSendsToTheLeader(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.register("i-1", "s1", "ready")
	if err := e.tracker.Heartbeat(ctx, "i-1", "s1"); !errors.Is(err, heartbeat.ErrNotLeader) {
		t.Fatalf("Heartbeat before leadership = %v, want ErrNotLeader", err)
	}
	if _, err := e.tracker.Observe("i-1", "s1", "v1"); !errors.Is(err, heartbeat.ErrNotLeader) {
		t.Fatalf("Observe before leadership = %v, want ErrNotLeader", err)
	}
}

// Heartbeats extend an observed instance's deadline; silence for a TTL
// expires it, and from that verdict on its heartbeats are refused.
func TestHeartbeatsKeepAnInstanceAlive(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.setLeader(true)
	v := e.register("i-1", "s1", "ready")

	l, err := e.tracker.Observe("i-1", "s1", v)
	if err != nil || l.Expired || !l.Deadline.Equal(t0.Add(testTTL)) {
		t.Fatalf("first Observe = %+v, %v; want alive until %v", l, err, t0.Add(testTTL))
	}
	for range 5 {
		e.clock.Advance(9 * time.Second)
		if err := e.tracker.Heartbeat(ctx, "i-1", "s1"); err != nil {
			t.Fatalf("Heartbeat = %v", err)
		}
	}
	l, _ = e.tracker.Observe("i-1", "s1", v)
	if l.Expired || !l.Deadline.Equal(e.clock.Now().Add(testTTL)) {
		t.Fatalf("after heartbeats Observe = %+v, want alive until %v", l, e.clock.Now().Add(testTTL))
	}

	e.clock.Advance(testTTL - time.Millisecond)
	if l, _ = e.tracker.Observe("i-1", "s1", v); l.Expired {
		t.Fatalf("a moment before the TTL: %+v, want alive", l)
	}
	e.clock.Advance(time.Millisecond)
	if l, _ = e.tracker.Observe("i-1", "s1", v); !l.Expired {
		t.Fatalf("a whole TTL without a heartbeat: %+v, want expired", l)
	}
	err = e.tracker.Heartbeat(ctx, "i-1", "s1")
	if status.Code(err) != codes.FailedPrecondition || heartbeat.ReasonOf(err) != heartbeat.ReasonDown {
		t.Fatalf("Heartbeat after the verdict = %v, want FailedPrecondition %s", err, heartbeat.ReasonDown)
	}
	// The verdict stands for the version judged...
	e.clock.Advance(time.Second)
	if l, _ = e.tracker.Observe("i-1", "s1", v); !l.Expired {
		t.Fatalf("Observe of the same version after the verdict: %+v, want expired", l)
	}
	// ...but an Instance written since (the agent registered again) gets a
	// whole TTL.
	if l, _ = e.tracker.Observe("i-1", "s1", "another-version"); l.Expired || !l.Deadline.Equal(e.clock.Now().Add(testTTL)) {
		t.Fatalf("Observe of a new version: %+v, want a fresh TTL", l)
	}
	if err := e.tracker.Heartbeat(ctx, "i-1", "s1"); err != nil {
		t.Fatalf("Heartbeat after a fresh TTL = %v", err)
	}
}

// A new session (the agent restarted and registered again) starts afresh.
func TestNewSessionGetsAFreshTTL(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.tracker.Observe("i-1", "s1", "v1")
	e.clock.Advance(testTTL + time.Second)
	l, _ := e.tracker.Observe("i-1", "s2", "v2")
	if l.Expired || !l.Deadline.Equal(e.clock.Now().Add(testTTL)) {
		t.Fatalf("Observe with a new session = %+v, want a fresh TTL", l)
	}
}

// Heartbeats for instances the controller has not observed in this term
// are judged by the store, and accepted ones change nothing.
func TestUnobservedHeartbeatsAreJudgedByTheStore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.setLeader(true)
	e.register("ready-1", "s1", "ready")
	e.register("draining-1", "s1", "draining")
	e.register("down-1", "s1", "down")
	e.register("left-1", "s1", "left")
	for _, c := range []struct {
		instance, session string
		code              codes.Code
		reason            heartbeat.Reason
	}{
		{"ready-1", "s1", codes.OK, ""},
		{"draining-1", "s1", codes.OK, ""},
		{"ready-1", "s0", codes.FailedPrecondition, heartbeat.ReasonSessionMismatch},
		{"down-1", "s1", codes.FailedPrecondition, heartbeat.ReasonDown},
		{"left-1", "s1", codes.FailedPrecondition, heartbeat.ReasonLeft},
		{"nobody", "s1", codes.NotFound, heartbeat.ReasonNotRegistered},
	} {
		err := e.tracker.Heartbeat(ctx, c.instance, c.session)
		if status.Code(err) != c.code || heartbeat.ReasonOf(err) != c.reason {
			t.Errorf("Heartbeat(%s, %s) = %v (reason %q), want %v %q", c.instance, c.session, err, heartbeat.ReasonOf(err), c.code, c.reason)
		}
	}
	// The accepted heartbeat did not start a deadline: the first verdict
	// gives a whole TTL from when it is asked.
	e.clock.Advance(time.Hour)
	if l, _ := e.tracker.Observe("ready-1", "s1", "v"); l.Expired || !l.Deadline.Equal(e.clock.Now().Add(testTTL)) {
		t.Fatalf("first Observe after unobserved heartbeats = %+v, want a fresh TTL", l)
	}
}

// A heartbeat for an observed instance under another session is the
// store's to judge: the new registration's session is accepted before the
// controller has observed it, the old one refused.
func TestSessionChangeIsJudgedByTheStore(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.setLeader(true)
	e.tracker.Observe("i-1", "s1", "v1")
	e.register("i-1", "s2", "ready")
	if err := e.tracker.Heartbeat(ctx, "i-1", "s2"); err != nil {
		t.Fatalf("Heartbeat of the stored session = %v", err)
	}
	if err := e.tracker.Heartbeat(ctx, "i-1", "s3"); heartbeat.ReasonOf(err) != heartbeat.ReasonSessionMismatch {
		t.Fatalf("Heartbeat of an unknown session = %v, want %s", err, heartbeat.ReasonSessionMismatch)
	}
}

// A leader change forgets everything: an instance silent for most of a TTL
// under the old leader has a whole TTL under the new one.
func TestLeadershipGivesAFreshTTL(t *testing.T) {
	e := newEnv(t)
	e.setLeader(true)
	e.tracker.Observe("i-1", "s1", "v1")
	e.clock.Advance(9 * time.Second)
	e.setLeader(false)
	e.setLeader(true)
	e.clock.Advance(5 * time.Second)
	l, err := e.tracker.Observe("i-1", "s1", "v1")
	if err != nil || l.Expired || !l.Deadline.Equal(e.clock.Now().Add(testTTL)) {
		t.Fatalf("Observe after a leader change = %+v, %v; want a fresh TTL", l, err)
	}
}

// Forget drops an instance: its heartbeats are then judged by the store.
func TestForget(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.setLeader(true)
	e.register("i-1", "s1", "ready")
	e.tracker.Observe("i-1", "s1", "v1")
	e.register("i-1", "s1", "down")
	// Observed: the tracker alone answers, and the instance is alive to it.
	if err := e.tracker.Heartbeat(ctx, "i-1", "s1"); err != nil {
		t.Fatalf("Heartbeat while observed = %v", err)
	}
	e.tracker.Forget("i-1")
	if err := e.tracker.Heartbeat(ctx, "i-1", "s1"); heartbeat.ReasonOf(err) != heartbeat.ReasonDown {
		t.Fatalf("Heartbeat after Forget of a down instance = %v, want %s", err, heartbeat.ReasonDown)
	}
}

func TestTTLBounds(t *testing.T) {
	e := newEnv(t)
	if _, err := heartbeat.NewTracker(heartbeat.Config{TTL: time.Millisecond, Instances: e.api}); err == nil {
		t.Fatal("a 1ms TTL was accepted")
	}
	tr, err := heartbeat.NewTracker(heartbeat.Config{Instances: e.api})
	if err != nil || tr.TTL() != heartbeat.DefaultTTL {
		t.Fatalf("default TTL = %v, %v", tr.TTL(), err)
	}
}

// A leader fresh from an election gives every instance the failover TTL
// from its takeover: an instance whose agent is still finding the new
// leader is not marked down, while one that stays silent past it is.
func TestNewLeaderGivesTheFailoverTTL(t *testing.T) {
	const failover = 3 * testTTL
	e := newEnvFailover(t, failover)
	ctx := context.Background()
	e.setLeader(true)
	takeover := e.clock.Now()
	live := e.register("live", "s1", "ready")
	dead := e.register("dead", "s2", "ready")
	for _, in := range []struct{ name, session, version string }{{"live", "s1", live}, {"dead", "s2", dead}} {
		if l, err := e.tracker.Observe(in.name, in.session, in.version); err != nil || l.Expired || !l.Deadline.Equal(takeover.Add(failover)) {
			t.Fatalf("first Observe of %s = %+v, %v; want alive until the failover TTL", in.name, l, err)
		}
	}
	// The live agent finds the new leader 25 s after the takeover, long
	// after a TTL: it is alive, and a TTL from its heartbeat.
	e.clock.Advance(25 * time.Second)
	if err := e.tracker.Heartbeat(ctx, "live", "s1"); err != nil {
		t.Fatalf("Heartbeat 25 s after the takeover = %v", err)
	}
	e.clock.Advance(failover - 25*time.Second)
	if l, _ := e.tracker.Observe("live", "s1", live); l.Expired {
		t.Fatalf("live instance at the end of the failover TTL = %+v, want alive", l)
	}
	if l, _ := e.tracker.Observe("dead", "s2", dead); !l.Expired {
		t.Fatalf("silent instance at the end of the failover TTL = %+v, want expired", l)
	}
}

// A leader behind on its heartbeats (they waited on a follower, or the
// leader itself could not run) counts them as heard when a server first
// had them, and adds its own stalls to every deadline: an instance that
// heartbeats on time is never marked down for the servers' lateness, and
// a silent one still is.
func TestLateLeaderMarksOnlyTheSilentDown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.setLeader(true)
	live := e.register("live", "s1", "ready")
	dead := e.register("dead", "s2", "ready")
	e.tracker.Observe("live", "s1", live)
	e.tracker.Observe("dead", "s2", dead)

	// The agent heartbeats at 3 s; the heartbeat waits 8 s on a busy
	// follower and reaches the leader at 11 s, past the TTL of the
	// previous one, as heard at 3 s.
	e.clock.Advance(11 * time.Second)
	if err := e.tracker.HeartbeatHeard(ctx, "live", "s1", 8*time.Second); err != nil {
		t.Fatalf("late forwarded heartbeat = %v", err)
	}
	if l, _ := e.tracker.Observe("live", "s1", live); l.Expired || !l.Deadline.Equal(t0.Add(3*time.Second+testTTL)) {
		t.Fatalf("instance heard at 3 s, judged at 11 s = %+v, want alive until 13 s", l)
	}
	if l, _ := e.tracker.Observe("dead", "s2", dead); !l.Expired {
		t.Fatalf("silent instance after 11 s = %+v, want expired", l)
	}

	// Then the leader stalls for 6 s (starved of CPU): the live instance's
	// next heartbeat is taken at 17 s, 14 s after the one before, and
	// still in time.
	e.tracker.Stall(6 * time.Second)
	e.clock.Advance(6 * time.Second)
	if l, _ := e.tracker.Observe("live", "s1", live); l.Expired || !l.Deadline.Equal(t0.Add(3*time.Second+testTTL+6*time.Second)) {
		t.Fatalf("after a 6 s stall = %+v, want alive until 19 s", l)
	}
	if err := e.tracker.Heartbeat(ctx, "live", "s1"); err != nil {
		t.Fatalf("heartbeat after the stall = %v", err)
	}
	// A stall before the last heartbeat buys nothing after it.
	e.clock.Advance(testTTL)
	if l, _ := e.tracker.Observe("live", "s1", live); !l.Expired {
		t.Fatalf("silent for a TTL after its last heartbeat = %+v, want expired", l)
	}
}

// When the whole fleet's heartbeats arrive late (the servers are behind,
// or the host running the agents is starved), the leader extends every
// deadline by the fleet's lateness: no instance that heartbeats is marked
// down, and one that has died is marked down once the fleet catches up.
func TestLateFleetIsNotMarkedDown(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.setLeader(true)
	const n = 20
	versions := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("i-%d", i)
		versions[name] = e.register(name, "s-"+name, "ready")
		e.tracker.Observe(name, "s-"+name, versions[name])
	}
	beat := func(i int) {
		name := fmt.Sprintf("i-%d", i)
		if err := e.tracker.Heartbeat(ctx, name, "s-"+name); err != nil {
			t.Fatalf("heartbeat of %s = %v", name, err)
		}
	}
	// On time: every instance heard within the last 3 s, the last one
	// dead since the start.
	for step := range 3 {
		e.clock.Advance(time.Second)
		for i := step; i < n-1; i += 3 {
			beat(i)
		}
	}
	// Then nothing reaches the leader for 12 s, longer than the TTL: the
	// servers are behind. No instance expires, not even the dead one: the
	// leader cannot tell it from the others yet.
	e.clock.Advance(12 * time.Second)
	for i := range n {
		name := fmt.Sprintf("i-%d", i)
		if l, err := e.tracker.Observe(name, "s-"+name, versions[name]); err != nil || l.Expired {
			t.Fatalf("%s while the whole fleet is late = %+v, %v; want alive", name, l, err)
		}
	}
	// The backlog arrives: every live instance is heard; the dead one,
	// alone silent now, is marked down.
	for i := range n - 1 {
		beat(i)
	}
	e.clock.Advance(time.Second) // the fleet's lateness is computed again every second
	dead := fmt.Sprintf("i-%d", n-1)
	if l, _ := e.tracker.Observe(dead, "s-"+dead, versions[dead]); !l.Expired {
		t.Fatalf("the dead instance once the fleet caught up = %+v, want expired", l)
	}
	for i := range n - 1 {
		name := fmt.Sprintf("i-%d", i)
		if l, _ := e.tracker.Observe(name, "s-"+name, versions[name]); l.Expired {
			t.Fatalf("%s after it was heard = %+v, want alive", name, l)
		}
	}
}
