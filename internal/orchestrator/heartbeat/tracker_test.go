package heartbeat_test

import (
	"context"
	"errors"
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
