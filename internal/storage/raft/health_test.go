package raft

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestJudgeHealth(t *testing.T) {
	follower := healthInput{
		leader: "s1", lastContact: 50 * time.Millisecond, contactBound: time.Second,
		caughtUp: true, applied: 100, asked: 100,
	}
	with := func(f func(*healthInput)) healthInput {
		in := follower
		f(&in)
		return in
	}
	for _, tc := range []struct {
		name   string
		in     healthInput
		ok     bool
		reason string // a part of it
	}{
		{"caught-up leader", healthInput{isLeader: true, leaderReady: true}, true, ""},
		{"leader applying earlier terms", healthInput{isLeader: true}, false, "just elected"},
		{"follower in touch and caught up", follower, true, ""},
		{"no leader known", with(func(in *healthInput) { in.leader = "" }), false, "no cluster leader"},
		{"leader known, never heard from", with(func(in *healthInput) { in.neverContacted = true }), false, "since this server started"},
		{"leader silent past the bound (killed)", with(func(in *healthInput) { in.lastContact = 1500 * time.Millisecond }), false, "no contact with the leader s1 for 1.5s"},
		{"restarted, not caught up yet", with(func(in *healthInput) { in.caughtUp = false; in.applied = 40 }), false, "catching up"},
		{"behind what the leader had committed", with(func(in *healthInput) { in.behind = true; in.applied = 70 }), false, "applied index 70 of 100"},
		{"was behind, has applied it since", with(func(in *healthInput) { in.behind = true; in.applied = 100 }), true, ""},
		{"leader not asked for a while", with(func(in *healthInput) { in.roundErr = errors.New("boom"); in.roundAge = 4 * time.Second }), false, "boom"},
		{"one failed round is not enough", with(func(in *healthInput) { in.roundErr = errors.New("boom"); in.roundAge = 1500 * time.Millisecond }), true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := judgeHealth(tc.in)
			if ok != tc.ok || (tc.reason == "") != (reason == "") || !strings.Contains(reason, tc.reason) {
				t.Fatalf("judgeHealth = %v, %q; want %v, %q", ok, reason, tc.ok, tc.reason)
			}
		})
	}
}
