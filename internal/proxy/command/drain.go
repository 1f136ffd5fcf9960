package command

import (
	"context"
	"time"

	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/proxy"
)

// drainPoll paces the checks of the open connections during a drain.
var drainPoll = backoff.Policy{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond}

// drain waits until active reports no open connection or ctx ends, and
// returns how many were still open (0 when drained).
func drain(ctx context.Context, active func() int) int {
	w := backoff.Waiter{Policy: drainPoll}
	for {
		n := active()
		if n == 0 {
			return 0
		}
		if !w.Wait(ctx) {
			return active()
		}
	}
}

// activeConnections is the number of connections the proxy carries now,
// over all its listeners (its stats' active gauge).
func activeConnections(p *proxy.Proxy) int {
	families, err := p.Stats().Registry.Gather()
	if err != nil {
		return 0
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != activeMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			total += m.GetGauge().GetValue()
		}
	}
	return int(total)
}

const activeMetric = "trellis_proxy_connections_active"
