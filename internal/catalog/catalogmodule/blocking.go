package catalogmodule

import (
	"strconv"
	"time"

	"trellis.dev/trellis/internal/httpapi"
)

// Blocking queries as Consul answers them: ?index=N&wait=D holds the
// answer until the catalog changes past index N or D passes, whichever is
// first. Consul's bounds: D defaults to 5 minutes and is capped at 10
// (a longer wait is capped, not refused).
const (
	DefaultBlockingWait = 5 * time.Minute
	MaxBlockingWait     = 10 * time.Minute
)

// blocking is what a request asks of a blocking query: index 0 does not
// block.
type blocking struct {
	index uint64
	wait  time.Duration
}

// parseBlocking reads ?index= and ?wait= (either may be ""), refusing a
// bad one by name. A wait is a Go duration with a unit ("30s", "5m",
// "100ms", as Consul's clients send it), at most MaxBlockingWait.
func parseBlocking(index, wait string) (blocking, error) {
	b := blocking{wait: DefaultBlockingWait}
	if index != "" {
		n, err := strconv.ParseUint(index, 10, 64)
		if err != nil {
			return b, httpapi.InputError("index", "must be a non-negative integer (an X-Consul-Index), got %q", index)
		}
		b.index = n
	}
	if wait != "" {
		d, err := time.ParseDuration(wait)
		if err != nil {
			return b, httpapi.InputError("wait", "must be a duration with a unit, such as 30s or 5m, got %q", wait)
		}
		if d < 0 {
			return b, httpapi.InputError("wait", "must not be negative, got %q", wait)
		}
		b.wait = capWait(d)
	}
	return b, nil
}

// capWait is the wait a blocking query holds for: DefaultBlockingWait for
// none, MaxBlockingWait at most.
func capWait(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultBlockingWait
	case d > MaxBlockingWait:
		return MaxBlockingWait
	}
	return d
}

// consulFlag reads a Consul boolean parameter: present without a value,
// or a value strconv.ParseBool takes.
func consulFlag(name, v string, given bool) (bool, error) {
	if !given {
		return false, nil
	}
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, httpapi.InputError(name, "must be given bare, or as 1, true, 0 or false, got %q", v)
	}
	return b, nil
}

func notServed(name, why string) error {
	return httpapi.InputError(name, "is not served by Trellis's Consul-compatible API: %s", why)
}
