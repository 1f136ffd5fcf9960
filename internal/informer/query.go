package informer

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// Limits of a blocking query's wait, as Consul has them.
const (
	// DefaultQueryWait is the wait of a blocking query that names none.
	DefaultQueryWait = 5 * time.Minute
	// MaxQueryWait caps the wait a query asks for (?wait=999h waits this).
	MaxQueryWait = 10 * time.Minute
)

// Query is how a read of the informer is bounded: Consul's blocking
// queries (?index=, ?wait=) and consistency modes (?consistent, ?stale).
type Query struct {
	// MinIndex, when set, makes the read a blocking query: it answers once
	// the type has changed after MinIndex (the X-Consul-Index of the
	// caller's last answer), or when Wait has passed.
	MinIndex uint64
	// Wait bounds a blocking query's wait (DefaultQueryWait when zero,
	// never above MaxQueryWait).
	Wait time.Duration
	// Consistent makes the read hold every write the cluster acknowledged
	// before it (WaitConsistent). Without it, the read answers from this
	// server's cache as it is (Consul's default and stale modes alike: any
	// server answers).
	Consistent bool
}

// ErrBadQuery wraps every refusal of ParseQuery.
var ErrBadQuery = errors.New("bad query")

// ParseQuery reads a Query from a request's parameters: index (a
// non-negative integer), wait (a Go duration such as 30s or 5m, capped at
// MaxQueryWait), consistent and stale (flags; not both). A refusal names
// the parameter and wraps ErrBadQuery.
func ParseQuery(v url.Values) (Query, error) {
	var q Query
	if s := v.Get("index"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return Query{}, fmt.Errorf("%w: index: %q is not a non-negative integer", ErrBadQuery, s)
		}
		q.MinIndex = n
	}
	if s := v.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return Query{}, fmt.Errorf("%w: wait: %q is not a duration such as 30s or 5m", ErrBadQuery, s)
		}
		q.Wait = min(d, MaxQueryWait)
	}
	_, consistent := v["consistent"]
	_, stale := v["stale"]
	if consistent && stale {
		return Query{}, fmt.Errorf("%w: consistent and stale: ask for one of them", ErrBadQuery)
	}
	q.Consistent = consistent
	return q, nil
}

// Await bounds a read of typ by q, and returns the index to answer with
// (Consul's X-Consul-Index: the type's last change, never 0). It waits
// for the type's first listing, then, consistent, for the cluster's read
// index; then, blocking, until the type changes after q.MinIndex or the
// wait ends (not an error: the read answers with what the cache holds).
// The read that follows reads the informer's cache. It fails when ctx
// ends first, or when the read index cannot be had.
func (in *Informer) Await(ctx context.Context, typ *pbresource.Type, q Query) (uint64, error) {
	if q.Consistent {
		if _, err := in.WaitConsistent(ctx, typ); err != nil {
			return 0, err
		}
	} else if err := in.WaitIndex(ctx, typ, 0); err != nil {
		return 0, err
	}
	if q.MinIndex > 0 {
		wait := q.Wait
		if wait <= 0 {
			wait = DefaultQueryWait
		}
		wctx, cancel := context.WithTimeout(ctx, min(wait, MaxQueryWait))
		_, err := in.WaitChange(wctx, typ, q.MinIndex)
		cancel()
		if err != nil && ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	return max(in.LastChange(typ), 1), nil
}
