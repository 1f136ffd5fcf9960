package session

import (
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
)

func TestRegisterRequest(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	r := registration{
		cluster: "prod", address: "10.0.0.5:7710", session: "s2", version: "v1",
		facts: Facts{Hostname: "box", CPUs: 4, MemoryBytes: 8 << 30, Kernel: "6.1.0", Drivers: []*pborch.DriverInfo{
			{Name: "exec", Available: true, Detail: "cgroups v2"},
			{Name: "docker", Available: false, Detail: "no engine"},
		}},
		attributes: map[string]string{"zone": "a", "os": "plan9"},
	}
	r.facts.BridgeNetwork = true
	req := registerRequest("i-1", r, at)
	got := req.GetRegistration()
	want := map[string]string{
		"zone": "a", "os": runtime.GOOS, "arch": got.GetAttributes()["arch"], "hostname": "box",
		"cpu.count": "4", "memory.bytes": "8589934592", "kernel": "6.1.0", "driver.exec": "cgroups v2",
		"network.bridge": "true",
	}
	if len(got.GetAttributes()) != len(want) {
		t.Errorf("attributes %v, want %v", got.GetAttributes(), want)
	}
	for k, v := range want {
		if got.GetAttributes()[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, got.GetAttributes()[k], v)
		}
	}
	if req.GetInstance() != "i-1" || req.GetCluster() != "prod" || got.GetSession() != "s2" || got.GetLeft() {
		t.Errorf("request %v", req)
	}
	if got.GetResources().GetCpuMillis() != 4000 || !got.GetRegisteredAt().AsTime().Equal(at) || len(got.GetDrivers()) != 2 {
		t.Errorf("registration %v", got)
	}
	// Leaving is a registration with left set.
	r.left = true
	if !registerRequest("i-1", r, at).GetRegistration().GetLeft() {
		t.Error("left not set")
	}
}

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		failures int
		r        float64
		want     time.Duration
	}{
		{1, 0, 50 * time.Millisecond},
		{1, 0.999999, 100 * time.Millisecond},
		{2, 0, 100 * time.Millisecond},
		{3, 0.5, 300 * time.Millisecond},
		{20, 0, 5 * time.Second},
		{1000, 2, 10 * time.Second},
	} {
		got := retryDelay(100*time.Millisecond, 10*time.Second, c.failures, c.r)
		if d := got - c.want; d < -time.Microsecond*20 || d > time.Microsecond*20 {
			t.Errorf("retryDelay(%d, %v) = %s, want %s", c.failures, c.r, got, c.want)
		}
	}
	for _, r := range []float64{0, 0.5, 0.999} {
		got := heartbeatInterval(9*time.Second, r)
		if got > 3*time.Second || got < 2250*time.Millisecond {
			t.Errorf("heartbeatInterval(9s, %v) = %s, want within [2.25s, 3s]", r, got)
		}
	}
	// Reconnecting, the agent never waits longer than it would between
	// heartbeats: a server back from an election expects one within a TTL.
	for _, c := range []struct {
		ttl      time.Duration
		failures int
		r        float64
		want     time.Duration
	}{
		{9 * time.Second, 1, 0, 50 * time.Millisecond},           // the backoff
		{9 * time.Second, 20, 0, 3 * time.Second},                // a third of the TTL
		{9 * time.Second, 20, 0.999999, 2250 * time.Millisecond}, // less its jitter
		{2 * time.Second, 7, 0, 2 * time.Second / 3},
		{60 * time.Second, 20, 0, 5 * time.Second}, // the backoff's cap
	} {
		got := reconnectWait(100*time.Millisecond, 10*time.Second, c.ttl, c.failures, c.r)
		if d := got - c.want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("reconnectWait(ttl %s, %d, %v) = %s, want %s", c.ttl, c.failures, c.r, got, c.want)
		}
	}
}

func TestReconnectSpread(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		r    float64
		want time.Duration
	}{
		{12 * time.Second, 0, 0},
		{12 * time.Second, 0.5, 500 * time.Millisecond},
		{12 * time.Second, 1, 999999 * time.Microsecond}, // r is below 1
		{0, 0.5, 416666666 * time.Nanosecond},            // the default TTL (10 s) before any heartbeat
	} {
		if got := reconnectSpread(c.ttl, c.r); got != c.want {
			t.Errorf("reconnectSpread(%s, %v) = %s, want %s", c.ttl, c.r, got, c.want)
		}
	}
}

func TestKeepServer(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	ttl := 3 * time.Second
	for _, tc := range []struct {
		code codes.Code
		now  time.Time
		keep bool
	}{
		{codes.DeadlineExceeded, t0.Add(time.Second), true},           // a slow answer: stay
		{codes.DeadlineExceeded, t0.Add(ttl - time.Nanosecond), true}, // while the instance was heard alive within a TTL
		{codes.DeadlineExceeded, t0.Add(ttl), false},                  // a whole TTL of silence: the next server
		{codes.Unavailable, t0.Add(time.Millisecond), false},          // unreachable or shutting down: the next server
		{codes.FailedPrecondition, t0.Add(time.Millisecond), false},   // handled by registering again
		{codes.Canceled, t0.Add(time.Millisecond), false},             // the stream ended
	} {
		if got := keepServer(tc.code, tc.now, t0, ttl); got != tc.keep {
			t.Errorf("keepServer(%v, alive+%v) = %v, want %v", tc.code, tc.now.Sub(t0), got, tc.keep)
		}
	}
}
