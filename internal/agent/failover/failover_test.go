package failover

import "testing"

// TestLeaveMovesOnceForTheCurrentServer: leaving the current server moves
// to the next, round the list; leaving one already left (a second link
// that saw the same failure) moves nothing.
func TestLeaveMovesOnceForTheCurrentServer(t *testing.T) {
	s := New([]string{"a:1", "b:1", "c:1"})
	steps := []struct {
		leave, want string
	}{
		{"a:1", "b:1"},
		{"a:1", "b:1"}, // the session and the leaf cache both saw a:1 fail
		{"b:1", "c:1"},
		{"c:1", "a:1"}, // round the list
		{"x:1", "a:1"}, // not one of them
	}
	if got := s.Current(); got != "a:1" {
		t.Fatalf("starts on %s, want a:1", got)
	}
	for i, st := range steps {
		if got := s.Leave(st.leave); got != st.want || s.Current() != st.want {
			t.Fatalf("step %d: leaving %s moved to %s (current %s), want %s", i, st.leave, got, s.Current(), st.want)
		}
	}
}

// TestNoServers: a failover over no server names none, and never panics.
func TestNoServers(t *testing.T) {
	s := New(nil)
	if got := s.Current(); got != "" {
		t.Fatalf("current %q, want none", got)
	}
	if got := s.Leave("a:1"); got != "" {
		t.Fatalf("leave moved to %q, want none", got)
	}
}
