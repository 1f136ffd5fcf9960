package camodule

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"trellis.dev/trellis/internal/ca"
)

// The signing limit of one server: a token bucket for the rate
// (CAConfig.csr_max_per_second) and a count of signatures under way
// (csr_max_concurrent). A request over either is refused at once with a
// time to retry after, never queued: a queue without a bound is how a
// storm of agents re-signing after a rotation turns into timeouts for
// everyone.

// Which limit refused a request: a metric label.
const (
	LimitRate        = "rate"
	LimitConcurrency = "concurrency"
)

// RateLimitedError is a signing request refused by the limit. It is a
// ResourceExhausted wherever it travels; the HTTP route answers 429 with
// a Retry-After header, the gRPC service a "retry-after" trailer.
type RateLimitedError struct {
	// Limit is LimitRate or LimitConcurrency.
	Limit string
	// RetryAfter is when a retry may succeed, in whole seconds (at
	// least 1: the unit of Retry-After).
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	what := fmt.Sprintf("this server signs at most its csr_max_per_second; retry in %s", e.RetryAfter)
	if e.Limit == LimitConcurrency {
		what = fmt.Sprintf("this server is already signing its csr_max_concurrent certificates at once; retry in %s", e.RetryAfter)
	}
	return "the CA's signing limit is reached: " + what + " (or ask another server)"
}

// GRPCStatus makes the refusal a ResourceExhausted.
func (e *RateLimitedError) GRPCStatus() *status.Status {
	return status.New(codes.ResourceExhausted, e.Error())
}

// RetryAfterSeconds is RetryAfter as the value of a Retry-After header.
func (e *RateLimitedError) RetryAfterSeconds() string {
	return strconv.Itoa(int(e.RetryAfter / time.Second))
}

// Limits are the two limits of a server's signing, as the CAConfig sets
// them (0 means the default).
type Limits struct {
	PerSecond  float64
	Concurrent int
}

// withDefaults replaces zeros (and nonsense: the CAConfig's checks refuse
// negative values, but the limiter must hold whatever it is given) with
// the defaults.
func (l Limits) withDefaults() Limits {
	if !(l.PerSecond > 0) || math.IsInf(l.PerSecond, 0) {
		l.PerSecond = ca.DefaultCSRMaxPerSecond
	}
	if l.Concurrent <= 0 {
		l.Concurrent = ca.DefaultCSRMaxConcurrent
	}
	return l
}

// bucket is a token bucket: up to one second's worth of tokens (at least
// one), refilled at the rate. It is a plain value: take decides, with
// the time given.
type bucket struct {
	tokens float64
	last   time.Time // when tokens was counted; zero: never, the bucket is full
}

// take spends one token at now with the given rate, or says how long
// until one is there. A clock that steps back refills nothing.
func (b bucket) take(now time.Time, rate float64) (bucket, time.Duration, bool) {
	capacity := math.Max(rate, 1)
	switch {
	case b.last.IsZero():
		b.tokens, b.last = capacity, now
	case now.After(b.last):
		b.tokens += now.Sub(b.last).Seconds() * rate
		b.last = now
	}
	// Also when the rate was lowered: never more than the new capacity.
	b.tokens = math.Min(b.tokens, capacity)
	if b.tokens >= 1 {
		b.tokens--
		return b, 0, true
	}
	wait := time.Duration((1 - b.tokens) / rate * float64(time.Second))
	return b, wait, false
}

// retryAfter rounds a wait up to whole seconds, at least one: the unit of
// the Retry-After header, and a pace at which refused clients do not
// come back as a storm of their own.
func retryAfter(wait time.Duration) time.Duration {
	s := max(1, int64(math.Ceil(wait.Seconds())))
	return time.Duration(s) * time.Second
}

// Limiter applies Limits to one server's signatures. Time is given to
// Acquire, so that tests decide it. Safe for concurrent use.
type Limiter struct {
	mu       sync.Mutex
	limits   Limits
	bucket   bucket
	inFlight int
}

// NewLimiter returns a Limiter of limits (zeros are the defaults).
func NewLimiter(limits Limits) *Limiter {
	return &Limiter{limits: limits.withDefaults()}
}

// SetLimits changes the limits; signatures under way keep their place.
func (l *Limiter) SetLimits(limits Limits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limits = limits.withDefaults()
}

// Limits returns the limits in force.
func (l *Limiter) Limits() Limits {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limits
}

// Acquire admits one signature at now, or refuses it with a
// *RateLimitedError. An admitted caller calls release when it is done.
// The concurrency limit is checked first, so a request it refuses costs
// no token of the rate.
func (l *Limiter) Acquire(now time.Time) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight >= l.limits.Concurrent {
		return nil, &RateLimitedError{Limit: LimitConcurrency, RetryAfter: retryAfter(0)}
	}
	next, wait, ok := l.bucket.take(now, l.limits.PerSecond)
	l.bucket = next
	if !ok {
		return nil, &RateLimitedError{Limit: LimitRate, RetryAfter: retryAfter(wait)}
	}
	l.inFlight++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.inFlight--
			l.mu.Unlock()
		})
	}, nil
}
