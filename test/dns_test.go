package test

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	miekg "github.com/miekg/dns"

	"trellis.dev/trellis/internal/testcluster"
)

// Every server of a 3-server cluster, followers included, answers DNS
// from its own cache, as does an agent: an instance registered through
// one server is answered by all once its check passes, over UDP and TCP,
// and leaves every answer when its check fails.
func TestDNSOnEveryServerAndTheAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	becomeSubreaper(t)
	ctx := t.Context()
	dir := t.TempDir()
	bin := trellisBinary(t)
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: dir, Servers: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	agent, err := testcluster.StartAgent(testcluster.AgentOptions{Bin: bin, Dir: dir, Name: "dns-1", Servers: []string{c.Members[1].GRPCAddr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range c.Members {
				b, _ := os.ReadFile(m.LogPath)
				t.Logf("--- %s log ---\n%s", m.Name, tail(b, 3000))
			}
		}
	})
	addr := "http://" + c.Members[0].HTTPAddr
	cli := func(stdin string, args ...string) {
		t.Helper()
		cmd := exec.Command(bin, append(args, "-addr", addr)...)
		cmd.Stdin = strings.NewReader(stdin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("trellis %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	cli("type: catalog/v1/ServiceInstance\nname: api-1\ndata: {service: api, address: 10.3.0.1, port: 8080, checks: [{name: ttl, ttl: 3600s}]}\n", "service", "register", "-f", "-")
	cli("", "service", "check", "pass", "api-1", "ttl")

	dnsAddrs := []string{agent.DNSAddr}
	for _, m := range c.Members {
		dnsAddrs = append(dnsAddrs, m.DNSAddr)
	}
	answers := func(network, dnsAddr string) []string {
		m := new(miekg.Msg)
		m.SetQuestion("api.service.default.trellis.", miekg.TypeA)
		r, _, err := (&miekg.Client{Net: network, Timeout: 2 * time.Second}).Exchange(m, dnsAddr)
		if err != nil || r.Rcode != miekg.RcodeSuccess {
			return nil
		}
		out := []string{} // NOERROR with no record: empty, not nil
		for _, rr := range r.Answer {
			if a, ok := rr.(*miekg.A); ok {
				out = append(out, a.A.String())
			}
		}
		return out
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, a := range dnsAddrs {
			if err := testcluster.WaitFor(ctx, 30*time.Second, func() bool { return slices.Equal(answers(network, a), []string{"10.3.0.1"}) }); err != nil {
				t.Fatalf("%s %s: %v; answers %q", network, a, err, answers(network, a))
			}
		}
	}
	cli("", "service", "check", "fail", "api-1", "ttl")
	for _, a := range dnsAddrs {
		if err := testcluster.WaitFor(ctx, 30*time.Second, func() bool {
			got := answers("udp", a)
			return got != nil && len(got) == 0
		}); err != nil {
			t.Fatalf("%s after the check failed: %v; answers %q", a, err, answers("udp", a))
		}
	}
}
