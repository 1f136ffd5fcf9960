package heartbeat_test

import (
	"testing"
	"time"

	"trellis.dev/trellis/internal/orchestrator/heartbeat"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestJudge(t *testing.T) {
	const ttl = 10 * time.Second
	for _, c := range []struct {
		name      string
		lastHeard time.Time
		now       time.Time
		expired   bool
	}{
		{"just heard", t0, t0, false},
		{"a moment before the deadline", t0, t0.Add(ttl - time.Nanosecond), false},
		{"at the deadline: a whole TTL without a heartbeat", t0, t0.Add(ttl), true},
		{"long after", t0, t0.Add(time.Hour), true},
		{"heard after now (a clock step back): alive", t0.Add(time.Second), t0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := heartbeat.Judge(c.lastHeard, c.now, ttl)
			if got.Expired != c.expired || !got.Deadline.Equal(c.lastHeard.Add(ttl)) {
				t.Fatalf("Judge(%v, %v) = %+v, want expired %v, deadline %v", c.lastHeard, c.now, got, c.expired, c.lastHeard.Add(ttl))
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	for _, c := range []struct {
		name    string
		reg     heartbeat.Registration
		session string
		want    heartbeat.Reason
	}{
		{"ready, same session", heartbeat.Registration{Found: true, Status: "ready", Session: "s1"}, "s1", ""},
		{"draining, same session", heartbeat.Registration{Found: true, Status: "draining", Session: "s1"}, "s1", ""},
		{"not stored", heartbeat.Registration{}, "s1", heartbeat.ReasonNotRegistered},
		{"another session", heartbeat.Registration{Found: true, Status: "ready", Session: "s2"}, "s1", heartbeat.ReasonSessionMismatch},
		{"another session wins over down", heartbeat.Registration{Found: true, Status: "down", Session: "s2"}, "s1", heartbeat.ReasonSessionMismatch},
		{"down: a heartbeat does not bring it back", heartbeat.Registration{Found: true, Status: "down", Session: "s1"}, "s1", heartbeat.ReasonDown},
		{"left", heartbeat.Registration{Found: true, Status: "left", Session: "s1"}, "s1", heartbeat.ReasonLeft},
		{"unknown status", heartbeat.Registration{Found: true, Status: "hibernating", Session: "s1"}, "s1", heartbeat.ReasonDown},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := heartbeat.Admit(c.reg, c.session); got != c.want {
				t.Fatalf("Admit(%+v, %q) = %q, want %q", c.reg, c.session, got, c.want)
			}
		})
	}
}
