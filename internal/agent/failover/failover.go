// Package failover is the agent's one failover over its servers: the
// list it was given, and the server its links use now. The session and the
// leaf cache, before the session's first connection and between two, dial
// the server it names, and a failure seen by either moves both to the next
// server, once.
package failover

import "sync"

// Servers is the agent's servers in the order it tries them, and the one
// its links use now.
type Servers struct {
	addrs []string

	mu sync.Mutex
	i  int
}

// New makes the failover over addrs (gRPC host:port), starting with the
// first. With no address, Current is "".
func New(addrs []string) *Servers {
	return &Servers{addrs: append([]string(nil), addrs...)}
}

// Current is the server the agent's links use now.
func (s *Servers) Current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.addrs) == 0 {
		return ""
	}
	return s.addrs[s.i]
}

// Leave moves on to the next server when addr, the server a link was on
// and failed with or left, is still the current one: links that see one
// server fail together move the agent once, not once each. It returns the
// current server after the move.
func (s *Servers) Leave(addr string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.addrs) == 0 {
		return ""
	}
	if s.addrs[s.i] == addr {
		s.i = (s.i + 1) % len(s.addrs)
	}
	return s.addrs[s.i]
}
