package tasklogs

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Target is where a read is tried: this server's Hub (Local), or another
// server's ReadLogs at its server-to-server address.
type Target struct {
	Local bool
	// Addr is the other server's server-to-server address.
	Addr string
}

// Route says where to read the logs of an instance whose agent is
// attached here (attached) or not: here alone when it is (the agent's
// link is the one to use), else every other server in order, this
// server's own address (self) and empty ones left out. A read forwarded
// from another server (forwarded) is never forwarded again.
func Route(attached, forwarded bool, self string, servers []string) []Target {
	if attached {
		return []Target{{Local: true}}
	}
	if forwarded {
		return nil
	}
	out := make([]Target, 0, len(servers))
	seen := map[string]bool{self: true, "": true}
	for _, s := range servers {
		if !seen[s] {
			seen[s] = true
			out = append(out, Target{Addr: s})
		}
	}
	return out
}

// TryNext says whether, after err from one target, the next one may
// hold the agent: that target does not hold it, or could not be reached.
// Any other answer (the task has no such container, the reader went
// away, the read is refused) is the answer.
func TryNext(err error) bool {
	if IsNotAttached(err) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Unimplemented:
		// Unimplemented: a server of an older version, without the
		// service.
		return true
	}
	return false
}
