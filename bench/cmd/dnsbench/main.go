// Command dnsbench measures the DNS interface of an agent (issue 26's
// DNS benchmark) beside an authoritative peer, nsd, in the same run, and
// prints a Markdown report:
//
//   - it starts one `trellis server` and one `trellis agent` with
//     -dns-addr (the binary given by -trellis), registers -instances
//     instances of service api from outside Trellis and passes their
//     checks, and waits until the agent answers all of them;
//   - it writes the same names into a zone file that nsd (Debian's nsd)
//     serves: api.service.default.trellis. A and SRV, and the SRV
//     targets' A records;
//   - each server under test is pinned to one core (-core, with taskset),
//     dnsperf (Debian's dnsperf) to the other, and dnsperf asks the same
//     queries (A and SRV of the service, half each) as fast as the server
//     answers for -duration: queries per second, lost queries, average
//     latency; then a second dnsperf run at -latency-rate queries per
//     second with per-query output gives p50 and p99 latency.
//
// The agent answers from its own cache: the server is idle while it is
// measured. Every process it starts is ended when it finishes or fails.
//
//	go run ./cmd/dnsbench -trellis ../bin/trellis
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"trellis.dev/trellis/internal/testcluster"
)

// target is the issue's: queries per second on one core.
const target = 25000

type config struct {
	trellis, out     string
	instances        int
	duration         time.Duration
	clients          int
	core, clientCore int
	latencyRate      int
	keep             bool
}

func main() {
	var c config
	flag.StringVar(&c.trellis, "trellis", "../bin/trellis", "the trellis binary")
	flag.StringVar(&c.out, "out", "", "write the report here too")
	flag.IntVar(&c.instances, "instances", 10, "instances of the service")
	flag.DurationVar(&c.duration, "duration", 10*time.Second, "how long each throughput run lasts")
	flag.IntVar(&c.clients, "clients", 8, "dnsperf's clients (-c)")
	flag.IntVar(&c.core, "core", 1, "the core each server under test is pinned to")
	flag.IntVar(&c.clientCore, "client-core", 0, "the core dnsperf is pinned to")
	flag.IntVar(&c.latencyRate, "latency-rate", 5000, "queries per second of the latency runs")
	flag.BoolVar(&c.keep, "keep", false, "keep the working directory")
	flag.Parse()
	for _, tool := range []string{"dnsperf", "nsd", "taskset"} {
		if _, err := exec.LookPath(tool); err != nil {
			log.Fatalf("dnsbench needs %s (apt-get install dnsperf nsd util-linux)", tool)
		}
	}
	report, err := run(c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(report)
	if c.out != "" {
		if err := os.WriteFile(c.out, []byte(report), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

// result is one server's figures.
type result struct {
	name          string
	qps           float64
	lost          string
	avg, p50, p99 time.Duration
}

func run(c config) (string, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "dnsbench-")
	if err != nil {
		return "", err
	}
	if !c.keep {
		defer os.RemoveAll(dir)
	}
	bin, err := filepath.Abs(c.trellis)
	if err != nil {
		return "", err
	}
	cl, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: dir, Servers: 1})
	if err != nil {
		return "", fmt.Errorf("servers: %w", err)
	}
	defer cl.Stop()
	srv := cl.Members[0]
	// The agent runs on one core: its runtime is told so (it is pinned
	// once it has started, after it has read its affinity).
	os.Setenv("GOMAXPROCS", "1")
	agent, err := testcluster.StartAgent(testcluster.AgentOptions{Bin: bin, Dir: dir, Name: "dns-1", Servers: []string{srv.GRPCAddr}})
	os.Unsetenv("GOMAXPROCS")
	if err != nil {
		return "", fmt.Errorf("agent: %w", err)
	}
	defer agent.Stop()

	addrs := make([]netip.Addr, c.instances)
	for i := range addrs {
		addrs[i] = netip.AddrFrom4([4]byte{10, 1, byte((i + 1) / 256), byte((i + 1) % 256)})
	}
	if err := register(bin, "http://"+srv.HTTPAddr, addrs); err != nil {
		return "", err
	}
	host, port, _ := strings.Cut(agent.DNSAddr, ":")
	if err := testcluster.WaitFor(ctx, time.Minute, func() bool { return len(dig(host, port)) == c.instances }); err != nil {
		return "", fmt.Errorf("the agent does not answer the %d instances: %v (it answers %q)", c.instances, err, dig(host, port))
	}
	if err := exec.Command("taskset", "-a", "-cp", strconv.Itoa(c.core), strconv.Itoa(agent.PID())).Run(); err != nil {
		return "", fmt.Errorf("pin the agent: %w", err)
	}

	queries := filepath.Join(dir, "queries.txt")
	if err := os.WriteFile(queries, []byte("api.service.default.trellis A\napi.service.default.trellis SRV\n"), 0o644); err != nil {
		return "", err
	}
	ports, err := testcluster.FreePorts(1)
	if err != nil {
		return "", err
	}
	stopNSD, err := startNSD(dir, ports[0], c.core, addrs)
	if err != nil {
		return "", err
	}
	defer stopNSD()
	nsdPort := strconv.Itoa(ports[0])
	if got := dig("127.0.0.1", nsdPort); len(got) != c.instances {
		return "", fmt.Errorf("nsd answers %q; want %d addresses", got, c.instances)
	}

	var results []result
	for _, s := range []struct{ name, host, port string }{{"trellis agent", host, port}, {"nsd", "127.0.0.1", nsdPort}} {
		r, err := measure(c, s.name, s.host, s.port, queries)
		if err != nil {
			return "", err
		}
		results = append(results, r)
	}
	return reportOf(c, results), nil
}

// register registers one instance of api per address from outside
// Trellis, with a day's TTL check, and passes the checks.
func register(bin, httpAddr string, addrs []netip.Addr) error {
	var b strings.Builder
	for i, a := range addrs {
		fmt.Fprintf(&b, "---\ntype: catalog/v1/ServiceInstance\nname: api-%d\ndata: {service: api, address: %s, port: %d, checks: [{name: ttl, ttl: 86400s}]}\n", i+1, a, 8080+i)
	}
	cmd := exec.Command(bin, "service", "register", "-addr", httpAddr, "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("trellis service register: %v: %s", err, out)
	}
	for i := range addrs {
		if out, err := exec.Command(bin, "service", "check", "pass", "-addr", httpAddr, fmt.Sprintf("api-%d", i+1), "ttl").CombinedOutput(); err != nil {
			return fmt.Errorf("trellis service check pass: %v: %s", err, out)
		}
	}
	return nil
}

// dig returns the A records answered for api.service.default.trellis.
func dig(host, port string) []string {
	out, err := exec.Command("dig", "@"+host, "-p", port, "+short", "+tries=1", "+time=1", "api.service.default.trellis", "A").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// startNSD serves the same names from a zone file with nsd, pinned to
// core, on port.
func startNSD(dir string, port, core int, addrs []netip.Addr) (stop func(), err error) {
	nd := filepath.Join(dir, "nsd")
	if err := os.MkdirAll(nd, 0o755); err != nil {
		return nil, err
	}
	var z strings.Builder
	z.WriteString("$ORIGIN trellis.\n$TTL 0\n@ IN SOA ns.trellis. hostmaster.trellis. 1 3600 600 86400 0\n@ IN NS ns.trellis.\nns IN A 127.0.0.1\n")
	for i, a := range addrs {
		target := fmt.Sprintf("%x.addr", a.AsSlice())
		fmt.Fprintf(&z, "api.service.default IN A %s\napi.service.default IN SRV 1 1 %d %s\n%s IN A %s\n", a, 8080+i, target, target, a)
	}
	if err := os.WriteFile(filepath.Join(nd, "trellis.zone"), []byte(z.String()), 0o644); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`server:
  ip-address: 127.0.0.1@%d
  server-count: 1
  username: ""
  chroot: ""
  zonesdir: %q
  zonelistfile: %q
  xfrdfile: %q
  xfrdir: %q
  pidfile: %q
  logfile: %q
  verbosity: 0
  hide-version: yes
  rrl-ratelimit: 0
  rrl-whitelist-ratelimit: 0
remote-control:
  control-enable: no
zone:
  name: trellis.
  zonefile: trellis.zone
`, port, nd, filepath.Join(nd, "zone.list"), filepath.Join(nd, "xfrd.state"), nd, filepath.Join(nd, "nsd.pid"), filepath.Join(nd, "nsd.log"))
	confPath := filepath.Join(nd, "nsd.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("taskset", "-c", strconv.Itoa(core), "nsd", "-d", "-c", confPath)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nsd: %w", err)
	}
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	if err := testcluster.WaitFor(context.Background(), 10*time.Second, func() bool { return len(dig("127.0.0.1", strconv.Itoa(port))) > 0 }); err != nil {
		stop()
		log, _ := os.ReadFile(filepath.Join(nd, "nsd.log"))
		return nil, fmt.Errorf("nsd does not answer: %v: %s", err, log)
	}
	return stop, nil
}

// measure runs dnsperf against host:port: as fast as it answers, then at
// the latency rate with per-query output.
func measure(c config, name, host, port, queries string) (result, error) {
	r := result{name: name}
	out, err := exec.Command("taskset", "-c", strconv.Itoa(c.clientCore), "dnsperf", "-s", host, "-p", port, "-d", queries,
		"-l", strconv.Itoa(int(c.duration.Seconds())), "-c", strconv.Itoa(c.clients), "-q", "500").CombinedOutput()
	if err != nil {
		return r, fmt.Errorf("dnsperf against %s: %v: %s", name, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "Queries per second:"); ok {
			r.qps, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
		if v, ok := strings.CutPrefix(line, "Queries lost:"); ok {
			r.lost = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "Average Latency (s):"); ok {
			f, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			r.avg = time.Duration(f * float64(time.Second))
		}
	}
	if r.qps == 0 {
		return r, fmt.Errorf("dnsperf against %s: no rate in %s", name, out)
	}
	lat, err := latencies(c, host, port, queries)
	if err != nil {
		return r, fmt.Errorf("latency run against %s: %w", name, err)
	}
	slices.Sort(lat)
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return r, nil
}

// latencies runs dnsperf at the latency rate for 5 s, printing each
// answer with its latency (-v), and returns them.
func latencies(c config, host, port, queries string) ([]time.Duration, error) {
	cmd := exec.Command("taskset", "-c", strconv.Itoa(c.clientCore), "dnsperf", "-s", host, "-p", port, "-d", queries,
		"-l", "5", "-Q", strconv.Itoa(c.latencyRate), "-v")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var lat []time.Duration
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		// "> NOERROR api.service.default.trellis A 0.000123"
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != ">" {
			continue
		}
		if s, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			lat = append(lat, time.Duration(s*float64(time.Second)))
		}
	}
	if err := cmd.Wait(); err != nil {
		return nil, err
	}
	if len(lat) == 0 {
		return nil, errors.New("no per-query latency in dnsperf's output")
	}
	return lat, nil
}

func reportOf(c config, rs []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## DNS: queries/s against an agent, a service of %d instances\n\n", c.instances)
	fmt.Fprintf(&b, "Each server pinned to core %d, dnsperf (%d clients) to core %d; queries: A and SRV of api.service.default.trellis., half each; %s per throughput run; latency at %d queries/s.\n\n",
		c.core, c.clients, c.clientCore, c.duration, c.latencyRate)
	b.WriteString("| server | queries/s | lost | avg latency | p50 | p99 |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %.0f | %s | %v | %v | %v |\n", r.name, r.qps, r.lost, r.avg.Round(time.Microsecond), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond))
	}
	verdict := "meets"
	if rs[0].qps < target {
		verdict = "misses"
	}
	fmt.Fprintf(&b, "\nThe agent answers %.0f queries/s on one core, %.2f× nsd's; it %s the issue's %d.\n", rs[0].qps, rs[0].qps/rs[1].qps, verdict, target)
	return b.String()
}
