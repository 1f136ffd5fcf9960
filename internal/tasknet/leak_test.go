package tasknet

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trellis.dev/trellis/internal/netns"
)

// leakCycles is how many tasks the leak test starts and stops: a hundred
// in `make test`, where one task's leak shows as surely as in a thousand
// (the footprint must come back exactly), and a thousand in `make
// test-long` (TRELLIS_LONG=1), for the leak that only a rare interleaving
// of setups and teardowns makes. TRELLIS_LEAK_CYCLES sets any number.
var leakCycles = envInt("TRELLIS_LEAK_CYCLES", longOr(100, 1000))

// longOr is short, or long when TRELLIS_LONG is set (as `make test-long`
// does). Not -short: `make test-short` already means a quick check
// without the multi-process tests.
func longOr(short, long int) int {
	if os.Getenv("TRELLIS_LONG") != "" {
		return long
	}
	return short
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// footprint is what a task's network leaves on a host, counted.
type footprint struct {
	Netns     int // mount points in the agent's netns dir
	Mounts    int // nsfs mounts under the agent's data dir
	Veths     int // veth devices in the host
	BridgeIfs int // devices in the host, all kinds
	Leases    int // host-local lease files
	Cached    int // libcni cached results
	Rules     int // iptables lines (chains and rules), nat and filter
	TaskRules int // of those, lines of one task
}

func (h *testHost) footprint(n *Network) footprint {
	h.t.Helper()
	var f footprint
	c := n.Config()
	ents, _ := os.ReadDir(c.netnsDir())
	f.Netns = len(ents)
	mi, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		h.t.Fatal(err)
	}
	sc := bufio.NewScanner(mi)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], c.DataDir+"/") {
			f.Mounts++
		}
	}
	mi.Close()
	h.do(func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		f.BridgeIfs = len(ifs)
		for _, i := range ifs {
			if strings.HasPrefix(i.Name, "veth") {
				f.Veths++
			}
		}
		return nil
	})
	ents, _ = os.ReadDir(c.leaseDir())
	for _, e := range ents {
		if _, err := strconv.ParseUint(strings.ReplaceAll(e.Name(), ".", ""), 10, 64); err == nil && strings.Count(e.Name(), ".") == 3 {
			f.Leases++
		}
	}
	ents, _ = os.ReadDir(c.cacheDir() + "/results")
	f.Cached = len(ents)
	save := h.run("iptables-save")
	f.Rules = ruleCount(save)
	f.TaskRules = len(taskRules(save))
	return f
}

// leakCycle starts and stops task i, with a port published.
func (h *testHost) leakCycle(n *Network, i int) error {
	var err error
	netnsErr := netns.Do(h.path, func() error {
		att, e := n.Setup(context.Background(), Request{TaskUID: fmt.Sprintf("LEAK%05d", i), Ports: []Port{{Name: "http", ContainerPort: 8080}}})
		if e != nil {
			err = e
			return nil
		}
		err = n.Teardown(context.Background(), att)
		return nil
	})
	if netnsErr != nil {
		return netnsErr
	}
	return err
}

// leaked names what the host holds after the tasks that it did not before
// them, or that no task may leave: the leak test's verdict, empty when
// nothing leaked. Counts must come back exactly, so that one task's
// namespace, veth, lease or rule is a leak.
func leaked(before, after footprint) []string {
	var out []string
	check := func(what string, b, a int, mustBeZero bool) {
		if a != b || (mustBeZero && a != 0) {
			out = append(out, fmt.Sprintf("%s %d, was %d", what, a, b))
		}
	}
	check("namespaces", before.Netns, after.Netns, true)
	check("nsfs mounts", before.Mounts, after.Mounts, true)
	check("veths", before.Veths, after.Veths, true)
	check("devices", before.BridgeIfs, after.BridgeIfs, false)
	check("leases", before.Leases, after.Leases, true)
	check("cached results", before.Cached, after.Cached, true)
	check("iptables lines", before.Rules, after.Rules, false)
	check("iptables lines of a task", before.TaskRules, after.TaskRules, true)
	return out
}

// Nothing leaks over leakCycles task starts and stops: after them the
// host has the namespaces, veths, leases, cached results and iptables
// rules it had after the first (which made the bridge and the chains the
// plugins share). Tasks come and go four at a time, each with a port
// published, as an agent's do.
func TestNoLeaksOverManyCycles(t *testing.T) {
	if testing.Short() {
		t.Skip("the leak test is long (a minute for 100 cycles); it runs without -short")
	}
	h := newTestHost(t)
	n := h.network()
	if err := h.leakCycle(n, 0); err != nil {
		t.Fatal(err)
	}
	before := h.footprint(n)
	t.Logf("after the first task: %+v", before)

	const workers = 4
	start := time.Now()
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := h.leakCycle(n, i); err != nil {
					errs <- fmt.Errorf("cycle %d: %w", i, err)
					return
				}
			}
		}()
	}
	func() {
		defer close(next)
		for i := 1; i < leakCycles; i++ {
			select {
			case next <- i:
			case err := <-errs:
				t.Error(err)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	after := h.footprint(n)
	t.Logf("after %d tasks (%v): %+v", leakCycles, time.Since(start).Round(time.Second), after)
	if l := leaked(before, after); len(l) > 0 {
		t.Fatalf("leaked: %s (before %+v, after %+v)", strings.Join(l, "; "), before, after)
	}
}

// The leak test's verdict sees a single leak: one task left set up (its
// namespace, veth, lease, cached result and rules), then one iptables
// rule left alone. This is what lets `make test` run a hundred cycles
// rather than a thousand: a leak of one cycle fails either.
func TestLeakVerdictSeesOneLeak(t *testing.T) {
	h := newTestHost(t)
	n := h.network()
	if err := h.leakCycle(n, 0); err != nil {
		t.Fatal(err)
	}
	before := h.footprint(n)
	if l := leaked(before, h.footprint(n)); len(l) > 0 {
		t.Fatalf("leaked with no task: %s", strings.Join(l, "; "))
	}

	att := h.setup(n, Request{TaskUID: "LEAKONE", Ports: []Port{{Name: "http", ContainerPort: 8080}}})
	got := strings.Join(leaked(before, h.footprint(n)), "; ")
	for _, want := range []string{"namespaces 1", "nsfs mounts 1", "veths 1", "leases 1", "cached results", "iptables lines of a task"} {
		if !strings.Contains(got, want) {
			t.Errorf("one task left set up: verdict %q does not say %q", got, want)
		}
	}
	h.teardown(n, att)
	if l := leaked(before, h.footprint(n)); len(l) > 0 {
		t.Fatalf("leaked after the teardown: %s", strings.Join(l, "; "))
	}

	h.run("iptables", "-t", "nat", "-A", "POSTROUTING", "-s", "198.18.0.9/32", "-j", "RETURN")
	if got := strings.Join(leaked(before, h.footprint(n)), "; "); !strings.Contains(got, "iptables lines") {
		t.Errorf("one rule left: verdict %q does not say so", got)
	}
}
