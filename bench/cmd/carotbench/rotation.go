package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"trellis.dev/trellis/bench/internal/caroots"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/ca/camodule"
	"trellis.dev/trellis/internal/sim"
	"trellis.dev/trellis/internal/testcluster"
)

// rotation is what one rotation measured.
type rotation struct {
	limit              float64 // csr_max_per_second, per server
	servers, agents    int
	window             time.Duration
	loadStart, loadEnd string

	start        time.Time     // `trellis ca rotate` began
	rootSeen     time.Duration // from start until the sim named the new root
	converged    time.Duration // from start until every agent held a leaf of it; 0: never
	lastStatus   sim.LeafStatus
	statusErrs   int // reads of the sim's status that failed
	points       []point
	verified     int
	verifyErr    error
	newID, oldID string
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// rotations runs the cluster and the fleet, and rotates once per limit.
func (b *bench) rotations(ctx context.Context) ([]*rotation, error) {
	fmt.Fprintf(b.progress, "carotbench: starting %d servers\n", b.servers)
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: b.trellis, Dir: b.dir, Servers: b.servers, Extra: []string{"-log-level", "warn"}})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	var roots *camodule.RootsBody
	err = testcluster.WaitFor(ctx, 60*time.Second, func() bool {
		roots, err = caroots.Agreed(c.Members)
		return err == nil
	})
	if err != nil {
		return nil, fmt.Errorf("the CA has no active root on every server: %v", err)
	}

	ports, err := testcluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	status := fmt.Sprintf("127.0.0.1:%d", ports[0])
	var grpcAddrs []string
	for _, m := range c.Members {
		grpcAddrs = append(grpcAddrs, m.GRPCAddr)
	}
	extra := []string{"-ca-leaves", "-ca-resign-window", b.window.String(), "-status-addr", status, "-datacenter", roots.Datacenter}
	if b.serviceLeaf {
		extra = append(extra, "-ca-service-leaf")
	}
	fmt.Fprintf(b.progress, "carotbench: starting %d simulated agents with leaves\n", b.agents)
	fleet, err := testcluster.StartSim(testcluster.SimOptions{Bin: b.trellis, Dir: b.dir, Label: "fleet", Prefix: "sim-",
		Instances: b.agents, Servers: grpcAddrs, Extra: extra})
	if err != nil {
		return nil, err
	}
	defer fleet.Stop()
	statusURL := "http://" + status
	var st sim.LeafStatus
	err = testcluster.WaitFor(ctx, 5*time.Minute, func() bool {
		st, err = leafStatus(statusURL)
		return err == nil && st.Instances == b.agents && st.OfActiveRoot == b.agents && st.ActiveRootID == roots.ActiveRootID
	})
	if err != nil {
		return nil, fmt.Errorf("the agents never all held a leaf: %+v, %v (sim log %s)", st, err, fleet.LogPath)
	}
	fmt.Fprintf(b.progress, "carotbench: all %d agents hold a leaf of root %s\n", b.agents, st.ActiveRootID)

	var out []*rotation
	for _, limit := range b.limits {
		r, err := b.rotate(ctx, c.Members, statusURL, limit)
		if r != nil {
			out = append(out, r)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// rotate sets the limit, rotates, and follows the servers and the fleet
// until every agent holds a leaf of the new root.
func (b *bench) rotate(ctx context.Context, members []*testcluster.Member, statusURL string, limit float64) (*rotation, error) {
	r := &rotation{limit: limit, servers: len(members), agents: b.agents, window: b.window}
	addr := "http://" + members[0].HTTPAddr
	value := strconv.FormatFloat(limit, 'f', -1, 64)
	fmt.Fprintf(b.progress, "carotbench: csr_max_per_second %s\n", value)
	if err := b.cli(ctx, "csr_max_per_second: "+value+"\n", "ca", "config", "set", "-f", "-", "-addr", addr); err != nil {
		return nil, err
	}
	for _, m := range members {
		var got string
		err := testcluster.WaitFor(ctx, 30*time.Second, func() bool {
			got = configLimit(m.HTTPAddr)
			return got == value
		})
		if err != nil {
			return nil, fmt.Errorf("%s: csr_max_per_second is %q, not %s", m.Name, got, value)
		}
	}
	before, err := caroots.Agreed(members)
	if err != nil {
		return nil, err
	}
	r.oldID = before.ActiveRootID

	// Read the servers' counters until the fleet has converged.
	sctx, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(b.sample)
		defer tick.Stop()
		for {
			p, err := readCounters(members)
			if err == nil {
				mu.Lock()
				r.points = append(r.points, p)
				mu.Unlock()
			}
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	defer func() {
		stopSampling()
		wg.Wait()
	}()
	// A second of readings before the rotation: the rate at rest.
	if !sleep(ctx, time.Second) {
		return nil, ctx.Err()
	}

	r.loadStart = testcluster.LoadAvg()
	fmt.Fprintf(b.progress, "carotbench: rotating\n")
	r.start = time.Now()
	// The fleet is followed while `trellis ca rotate` waits for the new
	// root, so that the time its watch names the root is measured.
	rotated := make(chan error, 1)
	go func() { rotated <- b.cli(ctx, "", "ca", "rotate", "-addr", addr) }()
	rotateDone := false
	deadline := r.start.Add(b.window + b.grace)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := leafStatus(statusURL)
		now := time.Now()
		if err != nil {
			r.statusErrs++
		}
		if err == nil {
			r.lastStatus = st
			if st.ActiveRootID != r.oldID && st.ActiveRootID != "" && r.rootSeen == 0 {
				r.rootSeen = now.Sub(r.start)
				r.newID = st.ActiveRootID
			}
			if r.newID != "" && st.ActiveRootID == r.newID && st.OfActiveRoot == b.agents {
				r.converged = now.Sub(r.start)
				break
			}
		}
		if !rotateDone {
			select {
			case err := <-rotated:
				if err != nil {
					return nil, err
				}
				rotateDone = true
			default:
			}
		}
		if now.After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
	}
	if !rotateDone {
		if err := <-rotated; err != nil {
			return nil, err
		}
	}
	// One more second of readings after the last re-signing.
	sleep(ctx, time.Second)
	stopSampling()
	wg.Wait()
	r.loadEnd = testcluster.LoadAvg()
	if r.converged == 0 {
		return r, fmt.Errorf("csr_max_per_second %s: %d of %d agents held a leaf of the new root %s after the rotation", value, r.lastStatus.OfActiveRoot, b.agents, time.Since(r.start).Round(time.Second))
	}
	fmt.Fprintf(b.progress, "carotbench: every agent holds a leaf of the new root after %s\n", r.converged.Round(time.Millisecond))

	after, err := caroots.Agreed(members)
	if err != nil {
		return r, err
	}
	r.verified, r.verifyErr = verifySample(statusURL, b.verifyEvery, before, after)
	return r, nil
}

// cli runs the trellis binary with stdin.
func (b *bench) cli(ctx context.Context, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, b.trellis, args...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("trellis %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// readCounters reads every server's signatures and rate-limited answers
// at once.
func readCounters(members []*testcluster.Member) (point, error) {
	p := point{signed: make([]float64, len(members)), limited: make([]float64, len(members))}
	errs := make([]error, len(members))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, m := range members {
		wg.Go(func() { p.signed[i], p.limited[i], errs[i] = counters(m.HTTPAddr) })
	}
	wg.Wait()
	p.at = t0.Add(time.Since(t0) / 2)
	return p, errors.Join(errs...)
}

// counters reads trellis_ca_signatures_total and the sum of
// trellis_ca_sign_rate_limited_total from one server's /v1/metrics.
func counters(httpAddr string) (signed, limited float64, err error) {
	resp, err := httpClient.Get("http://" + httpAddr + "/v1/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s/v1/metrics: %s", httpAddr, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, perr := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if perr != nil {
			continue
		}
		switch {
		case name == "trellis_ca_signatures_total":
			signed = v
		case strings.HasPrefix(name, "trellis_ca_sign_rate_limited_total"):
			limited += v
		}
	}
	return signed, limited, sc.Err()
}

func leafStatus(url string) (sim.LeafStatus, error) {
	var st sim.LeafStatus
	resp, err := httpClient.Get(url + "/v1/sim/leaves")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("/v1/sim/leaves: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// configLimit is csr_max_per_second as a server's GET /v1/ca/config says
// it.
func configLimit(httpAddr string) string {
	resp, err := httpClient.Get("http://" + httpAddr + "/v1/ca/config")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var body camodule.ConfigBody
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return ""
	}
	var cfg map[string]json.RawMessage
	if json.Unmarshal(body.Config, &cfg) != nil {
		return ""
	}
	return strings.Trim(string(cfg["csr_max_per_second"]), `"`)
}

// activeRoot is the active root's certificate of roots.
func activeRoot(roots *camodule.RootsBody) (*x509.Certificate, error) {
	for _, r := range roots.Roots {
		if r.ID == roots.ActiveRootID {
			certs, err := ca.ParseCerts([]byte(r.RootCert))
			if err != nil {
				return nil, err
			}
			return certs[0], nil
		}
	}
	return nil, fmt.Errorf("no root %s in the list", roots.ActiveRootID)
}

// verifySample fetches every Nth agent's leaf from the fleet and verifies
// each as a TLS peer would, against the new root alone and against the
// old root alone (through the cross-signed intermediate in its chain).
func verifySample(statusURL string, every int, before, after *camodule.RootsBody) (int, error) {
	oldRoot, err := activeRoot(before)
	if err != nil {
		return 0, err
	}
	newRoot, err := activeRoot(after)
	if err != nil {
		return 0, err
	}
	resp, err := httpClient.Get(statusURL + "/v1/sim/leaves/sample?every=" + strconv.Itoa(every))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var samples []sim.LeafSample
	if err := json.NewDecoder(resp.Body).Decode(&samples); err != nil {
		return 0, err
	}
	return verifyLeaves(samples, oldRoot, newRoot, after.TrustDomain, after.Datacenter, time.Now())
}

// verifyLeaves checks each sample against newRoot alone and oldRoot
// alone, and that it names an agent of the trust domain and datacenter.
func verifyLeaves(samples []sim.LeafSample, oldRoot, newRoot *x509.Certificate, td, dc string, now time.Time) (int, error) {
	if len(samples) == 0 {
		return 0, errors.New("the fleet sampled no leaf")
	}
	prefix := fmt.Sprintf("spiffe://%s/agent/client/dc/%s/id/", td, dc)
	for _, s := range samples {
		chain, err := ca.ParseCerts([]byte(s.ChainPEM))
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.Instance, err)
		}
		for _, root := range []struct {
			name string
			cert *x509.Certificate
		}{{"the new root", newRoot}, {"the old root", oldRoot}} {
			id, err := ca.VerifyPeer(chain, []*x509.Certificate{root.cert}, now)
			if err != nil {
				return 0, fmt.Errorf("%s: against %s alone: %w", s.Instance, root.name, err)
			}
			if id.String() != s.Instance || !strings.HasPrefix(id.String(), prefix) {
				return 0, fmt.Errorf("%s: the leaf names %s, not an agent of %s", s.Instance, id, prefix)
			}
		}
	}
	return len(samples), nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
