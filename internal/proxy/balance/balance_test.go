package balance

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testConfig() Config {
	return Config{ConsecutiveFailures: 3, BaseEjection: 10 * time.Second, MaxEjection: 35 * time.Second, MinAvailablePercent: 50}
}

func newBalancer(t *testing.T, cfg Config, policy Policy, addrs ...string) *Balancer {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.Update(t0, policy, addrs)
	return b
}

func picks(t *testing.T, b *Balancer, now time.Time, n int) string {
	t.Helper()
	var got []string
	for range n {
		a, ok := b.Pick(now, nil)
		if !ok {
			t.Fatal("Pick found nothing")
		}
		got = append(got, a)
	}
	return strings.Join(got, " ")
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"default", func(*Config) {}, ""},
		{"no failures", func(c *Config) { c.ConsecutiveFailures = 0 }, "ConsecutiveFailures: 0 is not at least 1"},
		{"no base", func(c *Config) { c.BaseEjection = 0 }, "BaseEjection: 0s is not positive"},
		{"max below base", func(c *Config) { c.MaxEjection = time.Second }, "MaxEjection: 1s is shorter than BaseEjection 30s"},
		{"percent", func(c *Config) { c.MinAvailablePercent = 101 }, "MinAvailablePercent: 101 is not within 0..100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.edit(&c)
			err := c.Validate()
			if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
				t.Errorf("got %v, want %q", err, tc.want)
			}
			if _, err := New(c); (err == nil) != (tc.want == "") {
				t.Errorf("New: %v", err)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": RoundRobin, "round_robin": RoundRobin, "least_request": LeastRequest} {
		if got, err := ParsePolicy(in); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParsePolicy("random"); err == nil || err.Error() != `load_balancer: "random" is not round_robin or least_request` {
		t.Errorf("ParsePolicy(random): %v", err)
	}
}

func TestRoundRobin(t *testing.T) {
	b := newBalancer(t, testConfig(), RoundRobin, "a", "b", "c")
	if got := picks(t, b, t0, 7); got != "a b c a b c a" {
		t.Errorf("picks: %s", got)
	}
	// A new set keeps the cursor within it.
	b.Update(t0, RoundRobin, []string{"a", "c"})
	if got := picks(t, b, t0, 4); got != "c a c a" {
		t.Errorf("after update: %s", got)
	}
}

func TestLeastRequest(t *testing.T) {
	b := newBalancer(t, testConfig(), LeastRequest, "a", "b", "c")
	b.Connected("a")
	b.Connected("a")
	b.Connected("b")
	// c has none open; then b and c tie at one, and the tie goes to the
	// first after the last pick (c), round robin: b.
	for i, want := range []string{"c", "b"} {
		a, _ := b.Pick(t0, nil)
		if a != want {
			t.Fatalf("pick %d: %s, want %s", i, a, want)
		}
		b.Connected(a)
	}
	b.Connected("c") // all 2: round robin from after b
	if got := picks(t, b, t0, 3); got != "c a b" {
		t.Errorf("ties: %s", got)
	}
	b.Closed("a")
	if a, _ := b.Pick(t0, nil); a != "a" {
		t.Errorf("after Closed(a): %s", a)
	}
}

func TestRetryNeverRepeatsATriedEndpoint(t *testing.T) {
	b := newBalancer(t, testConfig(), RoundRobin, "a", "b", "c")
	var tried []string
	for range 3 {
		a, ok := b.Pick(t0, tried)
		if !ok || slices.Contains(tried, a) {
			t.Fatalf("Pick(%v) = %q, %v", tried, a, ok)
		}
		tried = append(tried, a)
	}
	if a, ok := b.Pick(t0, tried); ok {
		t.Errorf("all tried, got %q", a)
	}
	if _, ok := newBalancer(t, testConfig(), RoundRobin).Pick(t0, nil); ok {
		t.Error("no endpoints, yet a pick")
	}
}

func TestEjection(t *testing.T) {
	b := newBalancer(t, testConfig(), RoundRobin, "a", "b", "c", "d")
	fail := func(now time.Time, addr string, n int) (ejected bool) {
		for range n {
			ejected = b.Failed(now, addr)
		}
		return ejected
	}
	if fail(t0, "a", 2) {
		t.Fatal("ejected after 2 of 3 failures")
	}
	b.Connected("a") // a success ends the streak
	if fail(t0, "a", 2) {
		t.Fatal("the streak survived a success")
	}
	if !fail(t0, "a", 1) {
		t.Fatal("not ejected after 3 in a row")
	}
	if got := picks(t, b, t0, 6); strings.Contains(got, "a") {
		t.Errorf("ejected a picked: %s", got)
	}
	// b's ejection leaves c and d: 2 of 4 is the floor (50 %).
	if !fail(t0, "b", 3) {
		t.Fatal("b not ejected")
	}
	if fail(t0, "c", 5) {
		t.Fatal("c ejected below the floor")
	}
	// Only d and c are in; c, tried, leaves d; d tried too leaves the
	// ejected endpoint whose ejection ends first.
	if a, _ := b.Pick(t0, []string{"c", "d"}); a != "a" {
		t.Errorf("fallback: %s, want a (ejected first)", a)
	}
	// a is back after 10 s; its second ejection lasts 20 s.
	now := t0.Add(10 * time.Second)
	if st := b.States(now)[0]; st.Ejected || st.Ejections != 1 {
		t.Errorf("a at 10s: %+v", st)
	}
	if !fail(now, "a", 3) {
		t.Fatal("a not ejected again")
	}
	if st := b.States(now)[0]; st.EjectedUntil != now.Add(20*time.Second) || st.Ejections != 2 {
		t.Errorf("second ejection: %+v", st)
	}
	// The third lasts 30 s, the fourth is capped at 35 s.
	now = now.Add(20 * time.Second)
	fail(now, "a", 3)
	if st := b.States(now)[0]; st.EjectedUntil != now.Add(30*time.Second) {
		t.Errorf("third ejection: %+v", st)
	}
	now = now.Add(30 * time.Second)
	fail(now, "a", 3)
	if st := b.States(now)[0]; st.EjectedUntil != now.Add(35*time.Second) {
		t.Errorf("fourth ejection: %+v", st)
	}
	// In for MaxEjection after that, the count is forgotten.
	now = now.Add(35*time.Second + 35*time.Second)
	fail(now, "a", 3)
	if st := b.States(now)[0]; st.EjectedUntil != now.Add(10*time.Second) || st.Ejections != 1 {
		t.Errorf("after a quiet spell: %+v", st)
	}
}

func TestUpdateKeepsStateAndTheFloor(t *testing.T) {
	b := newBalancer(t, testConfig(), RoundRobin, "a", "b", "c", "d")
	for range 3 {
		b.Failed(t0, "a")
	}
	b.Connected("c")
	// a stays ejected across a new snapshot; c keeps its connection.
	b.Update(t0, RoundRobin, []string{"d", "c", "a", "b", "c"})
	st := b.States(t0)
	if len(st) != 4 || st[2].Address != "a" || !st[2].Ejected || st[1].Active != 1 {
		t.Fatalf("states: %+v", st)
	}
	// With only a left, its ejection would leave none in.
	b.Update(t0, RoundRobin, []string{"a"})
	if st := b.States(t0); st[0].Ejected {
		t.Errorf("a still ejected below the floor: %+v", st)
	}
	// Unknown addresses are ignored.
	if b.Failed(t0, "zz") {
		t.Error("ejected an unknown address")
	}
	b.Connected("zz")
	b.Closed("zz")
}

// TestProperties drives a balancer with random operations and checks its
// invariants after each.
func TestProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := Config{
			ConsecutiveFailures: rapid.IntRange(1, 4).Draw(t, "failures"),
			BaseEjection:        time.Duration(rapid.IntRange(1, 10).Draw(t, "base")) * time.Second,
			MinAvailablePercent: rapid.IntRange(0, 100).Draw(t, "percent"),
		}
		cfg.MaxEjection = cfg.BaseEjection * time.Duration(rapid.IntRange(1, 5).Draw(t, "maxFactor"))
		b, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pool := []string{"a", "b", "c", "d", "e", "f"}
		addrGen := rapid.SampledFrom(pool)
		setGen := rapid.SliceOfN(addrGen, 0, 8)
		now := t0
		set := setGen.Draw(t, "set")
		policy := rapid.SampledFrom([]Policy{RoundRobin, LeastRequest}).Draw(t, "policy")
		b.Update(now, policy, set)
		open := map[string]int{}
		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch rapid.IntRange(0, 5).Draw(t, fmt.Sprint("op", step)) {
			case 0:
				set = setGen.Draw(t, "set")
				b.Update(now, policy, set)
				for a := range open {
					if !slices.Contains(set, a) {
						delete(open, a)
					}
				}
			case 1:
				now = now.Add(time.Duration(rapid.IntRange(0, 20).Draw(t, "advance")) * time.Second)
			case 2:
				b.Failed(now, addrGen.Draw(t, "failed"))
			case 3:
				tried := rapid.SliceOfDistinct(addrGen, rapid.ID).Draw(t, "tried")
				a, ok := b.Pick(now, tried)
				checkPick(t, b, now, tried, a, ok)
				if ok {
					b.Connected(a)
					open[a]++
				}
			case 4:
				for a, n := range open {
					if n > 0 {
						b.Closed(a)
						open[a]--
						break
					}
				}
			case 5:
				tried := []string{}
				for {
					a, ok := b.Pick(now, tried)
					checkPick(t, b, now, tried, a, ok)
					if !ok {
						break
					}
					tried = append(tried, a)
				}
				// A retry loop reaches every endpoint once.
				if got, want := len(tried), len(b.States(now)); got != want {
					t.Fatalf("retries reached %d of %d endpoints", got, want)
				}
			}
			checkFloor(t, b, now)
			for _, st := range b.States(now) {
				if st.Active != open[st.Address] {
					t.Fatalf("%s: %d open, want %d", st.Address, st.Active, open[st.Address])
				}
			}
		}
	})
}

func checkPick(t *rapid.T, b *Balancer, now time.Time, tried []string, a string, ok bool) {
	states := b.States(now)
	var untried, untriedIn []State
	for _, st := range states {
		if !slices.Contains(tried, st.Address) {
			untried = append(untried, st)
			if !st.Ejected {
				untriedIn = append(untriedIn, st)
			}
		}
	}
	if !ok {
		if len(untried) > 0 {
			t.Fatalf("no pick with %d untried endpoints", len(untried))
		}
		return
	}
	i := slices.IndexFunc(untried, func(st State) bool { return st.Address == a })
	if i < 0 {
		t.Fatalf("picked %q, not an untried endpoint of %+v (tried %v)", a, states, tried)
	}
	if untried[i].Ejected && len(untriedIn) > 0 {
		t.Fatalf("picked ejected %q while %d untried are in", a, len(untriedIn))
	}
	if b.policy == LeastRequest && !untried[i].Ejected {
		for _, st := range untriedIn {
			if st.Active < untried[i].Active {
				t.Fatalf("least request picked %q (%d open) over %q (%d)", a, untried[i].Active, st.Address, st.Active)
			}
		}
	}
}

func checkFloor(t *rapid.T, b *Balancer, now time.Time) {
	b.mu.Lock()
	floor, in := b.floor(), b.available(now)
	b.mu.Unlock()
	if in < floor {
		t.Fatalf("%d endpoints in, below the floor of %d", in, floor)
	}
}
