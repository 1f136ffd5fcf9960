package sim

import (
	"trellis.dev/trellis/internal/agent"

	"slices"
	"testing"
)

func TestServerOrderSpreadsTheFleet(t *testing.T) {
	servers := []string{"a", "b", "c"}
	for _, tc := range []struct {
		i    int
		want []string
	}{
		{0, []string{"a", "b", "c"}},
		{1, []string{"b", "c", "a"}},
		{2, []string{"c", "a", "b"}},
		{3, []string{"a", "b", "c"}},
		{4999, []string{"b", "c", "a"}},
	} {
		if got := agent.RotateServers(servers, tc.i); !slices.Equal(got, tc.want) {
			t.Errorf("agent.RotateServers(%v, %d) = %v, want %v", servers, tc.i, got, tc.want)
		}
	}
	if got := agent.RotateServers([]string{"only"}, 7); !slices.Equal(got, []string{"only"}) {
		t.Errorf("one server: got %v", got)
	}
	// The caller's list is never changed.
	agent.RotateServers(servers, 1)
	if !slices.Equal(servers, []string{"a", "b", "c"}) {
		t.Errorf("servers changed to %v", servers)
	}
}
