package orchestratormodule

import "testing"

// Agents are told the leader's public gRPC address: a wildcard listen
// address is no address to dial, so it takes the host the other servers
// reach this one at.
func TestAdvertisedPublic(t *testing.T) {
	tests := []struct{ listen, server, want string }{
		{"10.0.0.5:7701", "10.0.0.5:7703", "10.0.0.5:7701"},
		{"0.0.0.0:7701", "10.0.0.5:7703", "10.0.0.5:7701"},
		{"[::]:7701", "10.0.0.5:7703", "10.0.0.5:7701"},
		{":7701", "node-1.example:7703", "node-1.example:7701"},
		{"node-1.example:7701", "10.0.0.5:7703", "node-1.example:7701"},
		{"0.0.0.0:7701", "", "0.0.0.0:7701"}, // in memory: no server port
		{"not an address", "10.0.0.5:7703", "not an address"},
		{"0.0.0.0:7701", "no port", "0.0.0.0:7701"},
	}
	for _, tt := range tests {
		if got := advertisedPublic(tt.listen, tt.server); got != tt.want {
			t.Errorf("advertisedPublic(%q, %q) = %q, want %q", tt.listen, tt.server, got, tt.want)
		}
	}
}
