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

// leakCycles is how many tasks the leak test starts and stops.
var leakCycles = envInt("TRELLIS_LEAK_CYCLES", 1000)

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

// Nothing leaks over a thousand task starts and stops: after them the
// host has the namespaces, veths, leases, cached results and iptables
// rules it had after the first (which made the bridge and the chains the
// plugins share). Tasks come and go four at a time, each with a port
// published, as an agent's do.
func TestNoLeaksOverAThousandCycles(t *testing.T) {
	if testing.Short() {
		t.Skip("the 1,000-cycle leak test is long (minutes); it runs without -short")
	}
	h := newTestHost(t)
	n := h.network()
	cycle := func(i int) error {
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
	if err := cycle(0); err != nil {
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
				if err := cycle(i); err != nil {
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
	if after != before || after.Netns != 0 || after.Mounts != 0 || after.Veths != 0 || after.Leases != 0 || after.Cached != 0 || after.TaskRules != 0 {
		t.Fatalf("leaked: before %+v, after %+v", before, after)
	}
}
