package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// quantile is the q-quantile of sorted (nearest rank: the smallest value
// with at least q of the samples at or below it); 0 when there are none.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// summary is the distribution of a sample of durations.
type summary struct {
	n             int
	p50, p99, max time.Duration
}

func summarize(d []time.Duration) summary {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s) == 0 {
		return summary{}
	}
	return summary{n: len(s), p50: quantile(s, 0.50), p99: quantile(s, 0.99), max: s[len(s)-1]}
}

// ratio is a/b as the report prints it ("1.52×"), "–" when b is zero.
func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}

// consulIndex reads a blocking query's X-Consul-Index header: a positive
// integer, as Consul promises (0 would make a client spin).
func consulIndex(h string) (uint64, error) {
	i, err := strconv.ParseUint(h, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("X-Consul-Index %q: %w", h, err)
	}
	if i == 0 {
		return 0, fmt.Errorf("X-Consul-Index is 0")
	}
	return i, nil
}

// entries counts the entries of a /v1/health/service answer (a JSON
// array; null counts as none).
func entries(body []byte) (int, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(body, &list); err != nil {
		return 0, fmt.Errorf("health answer: %w", err)
	}
	return len(list), nil
}
