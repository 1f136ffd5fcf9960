package balance

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Policy is how Pick spreads connections over the endpoints.
type Policy string

// The policies of a snapshot's Upstream.load_balancer.
const (
	RoundRobin   Policy = "round_robin"
	LeastRequest Policy = "least_request"
)

// ParsePolicy reads a snapshot's load_balancer; empty is round robin.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "", RoundRobin:
		return RoundRobin, nil
	case LeastRequest:
		return LeastRequest, nil
	}
	return "", fmt.Errorf("load_balancer: %q is not round_robin or least_request", s)
}

// Config is the outlier ejection's parameters.
type Config struct {
	// ConsecutiveFailures is how many connects in a row an endpoint
	// fails before it is ejected.
	ConsecutiveFailures int
	// BaseEjection is the first ejection's length; the n-th lasts n
	// times as long, at most MaxEjection.
	BaseEjection time.Duration
	MaxEjection  time.Duration
	// MinAvailablePercent is the floor: ejections never leave fewer
	// than this share of the endpoints in (rounded up, at least one).
	MinAvailablePercent int
}

// DefaultConfig is the proxy's: 5 failures, 30 s growing to 5 min, half
// the endpoints always in.
func DefaultConfig() Config {
	return Config{
		ConsecutiveFailures: 5,
		BaseEjection:        30 * time.Second,
		MaxEjection:         5 * time.Minute,
		MinAvailablePercent: 50,
	}
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.ConsecutiveFailures < 1:
		return fmt.Errorf("ConsecutiveFailures: %d is not at least 1", c.ConsecutiveFailures)
	case c.BaseEjection <= 0:
		return fmt.Errorf("BaseEjection: %v is not positive", c.BaseEjection)
	case c.MaxEjection < c.BaseEjection:
		return fmt.Errorf("MaxEjection: %v is shorter than BaseEjection %v", c.MaxEjection, c.BaseEjection)
	case c.MinAvailablePercent < 0 || c.MinAvailablePercent > 100:
		return fmt.Errorf("MinAvailablePercent: %d is not within 0..100", c.MinAvailablePercent)
	}
	return nil
}

// endpoint is what the balancer knows of one address.
type endpoint struct {
	addr string
	// active counts the connections open to it.
	active int
	// failures counts its connect failures since its last success or
	// ejection.
	failures int
	// ejectedUntil is when its current or last ejection ends (zero:
	// never ejected); ejections counts them, for the growing length.
	ejectedUntil time.Time
	ejections    int
}

func (e *endpoint) ejected(now time.Time) bool { return now.Before(e.ejectedUntil) }

// Balancer holds the state of one upstream's endpoints.
type Balancer struct {
	cfg Config

	mu        sync.Mutex
	policy    Policy
	endpoints []*endpoint // in the snapshot's order
	// next is where round robin (and least request's tie break) starts.
	next int
}

// New returns a balancer with no endpoints; cfg must be valid.
func New(cfg Config) (*Balancer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Balancer{cfg: cfg, policy: RoundRobin}, nil
}

// Update sets the policy and the endpoints (addresses, in the snapshot's
// stable order, duplicates ignored), keeping the state of those that
// stay. If the endpoints left in are then below the floor, the ejections
// that end soonest are lifted until they are not.
func (b *Balancer) Update(now time.Time, policy Policy, addrs []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.policy = policy
	old := make(map[string]*endpoint, len(b.endpoints))
	for _, e := range b.endpoints {
		old[e.addr] = e
	}
	seen := make(map[string]bool, len(addrs))
	eps := make([]*endpoint, 0, len(addrs))
	for _, a := range addrs {
		if seen[a] {
			continue
		}
		seen[a] = true
		if e, ok := old[a]; ok {
			eps = append(eps, e)
		} else {
			eps = append(eps, &endpoint{addr: a})
		}
	}
	b.endpoints = eps
	if len(eps) > 0 {
		b.next %= len(eps)
	} else {
		b.next = 0
	}
	for b.available(now) < b.floor() {
		var soonest *endpoint
		for _, e := range eps {
			if e.ejected(now) && (soonest == nil || e.ejectedUntil.Before(soonest.ejectedUntil)) {
				soonest = e
			}
		}
		soonest.ejectedUntil = now
	}
}

// floor is how many endpoints ejections must leave in.
func (b *Balancer) floor() int {
	n := len(b.endpoints)
	if n == 0 {
		return 0
	}
	f := (n*b.cfg.MinAvailablePercent + 99) / 100
	return max(f, 1)
}

// available counts the endpoints not ejected at now.
func (b *Balancer) available(now time.Time) int {
	n := 0
	for _, e := range b.endpoints {
		if !e.ejected(now) {
			n++
		}
	}
	return n
}

// Pick chooses the endpoint for a connection attempt at now, none of
// tried (the addresses this connection already failed on). It prefers
// endpoints not ejected, by the policy; when every untried endpoint is
// ejected it returns the one whose ejection ends first. ok is false when
// no endpoint is left to try.
func (b *Balancer) Pick(now time.Time, tried []string) (addr string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.endpoints)
	best := -1
	for k := range n {
		i := (b.next + k) % n
		e := b.endpoints[i]
		if e.ejected(now) || slices.Contains(tried, e.addr) {
			continue
		}
		if best < 0 {
			best = i
			if b.policy != LeastRequest {
				break
			}
			continue
		}
		if e.active < b.endpoints[best].active {
			best = i
		}
	}
	if best >= 0 {
		b.next = (best + 1) % n
		return b.endpoints[best].addr, true
	}
	for i, e := range b.endpoints {
		if slices.Contains(tried, e.addr) {
			continue
		}
		if best < 0 || e.ejectedUntil.Before(b.endpoints[best].ejectedUntil) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	return b.endpoints[best].addr, true
}

func (b *Balancer) find(addr string) *endpoint {
	for _, e := range b.endpoints {
		if e.addr == addr {
			return e
		}
	}
	return nil
}

// Connected records a connection opened to addr: its failure streak
// ends and it counts as one more open connection until Closed.
func (b *Balancer) Connected(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.find(addr); e != nil {
		e.failures = 0
		e.active++
	}
}

// Closed records the end of a connection Connected counted.
func (b *Balancer) Closed(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e := b.find(addr); e != nil && e.active > 0 {
		e.active--
	}
}

// Failed records a failed connect to addr at now, and reports whether it
// ejected the endpoint. An address no longer in the set is ignored.
func (b *Balancer) Failed(now time.Time, addr string) (ejected bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.find(addr)
	if e == nil || e.ejected(now) {
		return false
	}
	e.failures++
	if e.failures < b.cfg.ConsecutiveFailures || b.available(now)-1 < b.floor() {
		return false
	}
	if !e.ejectedUntil.IsZero() && now.Sub(e.ejectedUntil) >= b.cfg.MaxEjection {
		e.ejections = 0
	}
	e.ejections++
	e.failures = 0
	e.ejectedUntil = now.Add(ejectionLength(b.cfg, e.ejections))
	return true
}

// ejectionLength is the n-th ejection's length (n ≥ 1).
func ejectionLength(cfg Config, n int) time.Duration {
	if d := cfg.MaxEjection / cfg.BaseEjection; time.Duration(n) > d {
		return cfg.MaxEjection
	}
	return min(cfg.BaseEjection*time.Duration(n), cfg.MaxEjection)
}

// State is one endpoint's state, for /stats and tests.
type State struct {
	Address      string
	Active       int
	Failures     int
	Ejected      bool
	EjectedUntil time.Time
	Ejections    int
}

// States returns every endpoint's state at now, in the set's order.
func (b *Balancer) States(now time.Time) []State {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]State, 0, len(b.endpoints))
	for _, e := range b.endpoints {
		out = append(out, State{
			Address: e.addr, Active: e.active, Failures: e.failures,
			Ejected: e.ejected(now), EjectedUntil: e.ejectedUntil, Ejections: e.ejections,
		})
	}
	return out
}
