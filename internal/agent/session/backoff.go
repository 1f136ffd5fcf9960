package session

import (
	"math/rand/v2"
	"time"

	"trellis.dev/trellis/internal/backoff"
)

// retryDelay is the wait before the next attempt after failures consecutive
// failures (from 1): min·2^(failures-1), capped at max, scaled by a jitter
// factor in [1/2, 1) drawn from r in [0, 1), so that agents that lost the
// same server do not come back in step.
func retryDelay(minWait, maxWait time.Duration, failures int, r float64) time.Duration {
	return backoff.Policy{Base: minWait, Max: maxWait}.Delay(failures, r)
}

// reconnectWait is the wait before the next attempt to reach a server
// after failures consecutive failures: the backoff, but never longer than
// a heartbeat interval of the TTL. The servers mark an instance down after
// a TTL without a heartbeat, counted from when a new leader took over; an
// agent still backing off from an election would come back after that and
// find its instance down and its running tasks LOST, although nothing
// happened to them (a single server's restart did it one time in six with
// a 2 s TTL). Retrying at the heartbeat rate costs the servers no more
// than the heartbeats do.
func reconnectWait(minWait, maxWait, ttl time.Duration, failures int, r float64) time.Duration {
	return min(retryDelay(minWait, maxWait, failures, r), heartbeatInterval(ttl, r))
}

// reconnectSpread is the wait before an agent that lost a server it was
// using tries the next one: a random part (r in [0, 1)) of a twelfth of
// the TTL. A server that restarts or dies drops a third of the fleet at
// once; coming back at once, those agents would all register, heartbeat
// and list their tasks on the next server in the same instant (a
// thundering herd that makes it slow, and the next to be given up). Spread
// over a twelfth of the TTL (833 ms at the default 10 s), 1,700 agents
// arrive at about 2,000 a second, and each still heartbeats well within
// its TTL: its last heartbeat was at most a third of the TTL ago.
func reconnectSpread(ttl time.Duration, r float64) time.Duration {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	r = min(max(r, 0), 0.999999)
	return time.Duration(float64(ttl/12) * r)
}

// RotateServers returns servers starting at its i-th (modulo its length)
// and going round, so that a fleet given one list spreads its connections
// over the servers instead of piling onto the first: every agent tries its
// servers in order.
func RotateServers(servers []string, i int) []string {
	if len(servers) == 0 {
		return servers
	}
	k := i % len(servers)
	return append(append(make([]string, 0, len(servers)), servers[k:]...), servers[:k]...)
}

// heartbeatInterval is the wait between heartbeats: a third of the TTL,
// less up to a quarter of that at random (r in [0, 1)).
func heartbeatInterval(ttl time.Duration, r float64) time.Duration {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	third := ttl / 3
	r = min(max(r, 0), 0.999999)
	return third - time.Duration(float64(third/4)*r)
}

func randFloat() float64 { return rand.Float64() }
