package server

import "trellis.dev/trellis/internal/httpapi/wire"

// SingleNode is the ClusterStatus of a server that is a cluster by itself
// (the in-memory backend): it is always the leader, at its Raft address.
type SingleNode struct {
	// Addr is reported as the leader's and only peer's Raft address.
	Addr string
	// Datacenter is reported by Health.
	Datacenter string
	// Warnings name the server's open doors, reported by Health.
	Warnings []string
}

// Leader returns the server's own address.
func (s SingleNode) Leader() string { return s.Addr }

// Peers returns the server alone.
func (s SingleNode) Peers() ([]string, error) { return []string{s.Addr}, nil }

// Health is always good: the server leads itself and holds everything.
func (s SingleNode) Health() wire.Health {
	return wire.Health{Status: "ok", Leader: s.Addr, Datacenter: s.Datacenter, Warnings: s.Warnings}
}
