package redirect

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// testConfig redirects app port 8080, and lets port 9022 and the address
// 192.0.2.3 through, besides the defaults.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.AppPorts = []int{8080}
	cfg.ExcludeOutboundPorts = []int{9022}
	cfg.ExcludeOutboundCIDRs = append(cfg.ExcludeOutboundCIDRs, "192.0.2.3/32", "fd00:2::3")
	cfg.IPv6 = true
	return cfg
}

// mesh is an app's namespace, with the proxy's listeners (15000, 15001)
// and the app's (8080, and 7000 which is not an app port), joined to a
// peer namespace with a service on 9000 and 9022 at two addresses.
type mesh struct{ app, peer string }

func newMesh(t *testing.T) mesh {
	appName, app := newNetns(t)
	peerName, peer := newNetns(t)
	link(t, appName, []string{"192.0.2.1/24", "fd00:2::1/64"}, peerName, []string{"192.0.2.2/24", "192.0.2.3/24", "fd00:2::2/64", "fd00:2::3/64"})
	serve(t, app, ":15000", "proxy-inbound", true)
	serve(t, app, ":15001", "proxy-outbound", true)
	serve(t, app, ":8080", "app", false)
	serve(t, app, ":7000", "app-7000", false)
	serve(t, peer, ":9000", "peer", false)
	serve(t, peer, ":9022", "peer", false)
	return mesh{app: app, peer: peer}
}

func TestTrafficIsRedirected(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tools Tools) {
		m := newMesh(t)
		// Before the rules, the app reaches the peer directly.
		wantReply(t, "before", dial(t, m.app, "192.0.2.2:9000"), "peer local=192.0.2.2:9000")

		res := apply(t, tools, m.app, testConfig())
		if !slices.Equal(res.Families, []Family{IPv4, IPv6}) || res.IPv6Skipped {
			t.Fatalf("applied %+v, want IPv4 and IPv6", res)
		}

		// Outbound TCP reaches the proxy, which recovers where it went.
		wantReply(t, "outbound", dial(t, m.app, "192.0.2.2:9000"), "proxy-outbound local=127.0.0.1:15001 orig=192.0.2.2:9000")
		wantReply(t, "outbound IPv6", dial(t, m.app, "[fd00:2::2]:9000"), "proxy-outbound local=[::1]:15001 orig=[fd00:2::2]:9000")
		// Another user's too: the child process is no way around it.
		wantReply(t, "outbound as uid 1000", dialAs(t, m.app, "192.0.2.2:9000", 1000, 1000), "proxy-outbound local=127.0.0.1:15001 orig=192.0.2.2:9000")

		// The proxy's user, or group, goes straight out.
		wantReply(t, "as the proxy's uid", dialAs(t, m.app, "192.0.2.2:9000", 1337, 1337), "peer local=192.0.2.2:9000")
		wantReply(t, "as the proxy's gid", dialAs(t, m.app, "192.0.2.2:9000", 1000, 1337), "peer local=192.0.2.2:9000")
		wantReply(t, "IPv6 as the proxy's uid", dialAs(t, m.app, "[fd00:2::2]:9000", 1337, 1337), "peer local=[fd00:2::2]:9000")

		// So do an excluded port and an excluded CIDR.
		wantReply(t, "excluded port", dial(t, m.app, "192.0.2.2:9022"), "peer local=192.0.2.2:9022")
		wantReply(t, "excluded CIDR", dial(t, m.app, "192.0.2.3:9000"), "peer local=192.0.2.3:9000")
		wantReply(t, "excluded IPv6 CIDR", dial(t, m.app, "[fd00:2::3]:9000"), "peer local=[fd00:2::3]:9000")

		// Traffic inside the namespace is left alone.
		wantReply(t, "to itself", dial(t, m.app, "192.0.2.1:8080"), "app local=192.0.2.1:8080")
		wantReply(t, "over loopback", dial(t, m.app, "127.0.0.1:7000"), "app-7000 local=127.0.0.1:7000")

		// Inbound TCP to the app's port lands on the proxy's inbound port;
		// to another port, on that port.
		wantReply(t, "inbound", dial(t, m.peer, "192.0.2.1:8080"), "proxy-inbound local=192.0.2.1:15000 orig=192.0.2.1:8080")
		wantReply(t, "inbound IPv6", dial(t, m.peer, "[fd00:2::1]:8080"), "proxy-inbound local=[fd00:2::1]:15000 orig=[fd00:2::1]:8080")
		wantReply(t, "inbound, not an app port", dial(t, m.peer, "192.0.2.1:7000"), "app-7000 local=192.0.2.1:7000")
	})
}

func TestApplyTwiceLeavesOneSet(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tools Tools) {
		m := newMesh(t)
		cfg := testConfig()
		apply(t, tools, m.app, cfg)
		once := map[Family]string{IPv4: natTable(t, tools, m.app, IPv4), IPv6: natTable(t, tools, m.app, IPv6)}
		apply(t, tools, m.app, cfg)
		for f, want := range once {
			got := natTable(t, tools, m.app, f)
			if got != want {
				t.Errorf("%v after a second Apply:\n%s\nafter the first:\n%s", f, got, want)
			}
			for _, chain := range []string{OutboundChain, InboundChain} {
				if n := strings.Count(got, "-j "+chain+"\n"); n != 1 {
					t.Errorf("%v: %d jumps to %s:\n%s", f, n, chain, got)
				}
			}
		}
		wantReply(t, "outbound", dial(t, m.app, "192.0.2.2:9000"), "proxy-outbound local=127.0.0.1:15001 orig=192.0.2.2:9000")

		// A new configuration replaces the old one: no inbound chain now,
		// and port 9000 excluded.
		cfg.AppPorts = nil
		cfg.ExcludeOutboundPorts = []int{9000}
		apply(t, tools, m.app, cfg)
		got := natTable(t, tools, m.app, IPv4)
		if strings.Contains(got, InboundChain) || strings.Count(got, "-j "+OutboundChain+"\n") != 1 {
			t.Errorf("after a new configuration:\n%s", got)
		}
		wantReply(t, "excluded now", dial(t, m.app, "192.0.2.2:9000"), "peer local=192.0.2.2:9000")
		wantReply(t, "inbound not redirected now", dial(t, m.peer, "192.0.2.1:8080"), "app local=192.0.2.1:8080")
	})
}

func TestRemoveLeavesTheTableAsBefore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tools Tools) {
		m := newMesh(t)
		// Someone else's rules, before and after ours, stay.
		iptables(t, tools, m.app, IPv4, "-t", "nat", "-A", "OUTPUT", "-p", "udp", "-j", "RETURN")
		iptables(t, tools, m.app, IPv4, "-t", "nat", "-N", "OTHER")
		iptables(t, tools, m.app, IPv4, "-t", "nat", "-A", "PREROUTING", "-p", "tcp", "--dport", "7000", "-j", "OTHER")
		before := map[Family]string{IPv4: natTable(t, tools, m.app, IPv4), IPv6: natTable(t, tools, m.app, IPv6)}

		apply(t, tools, m.app, testConfig())
		iptables(t, tools, m.app, IPv4, "-t", "nat", "-A", "OUTPUT", "-p", "icmp", "-j", "RETURN")
		if res := remove(t, tools, m.app); !slices.Equal(res.Families, []Family{IPv4, IPv6}) {
			t.Fatalf("removed from %v, want IPv4 and IPv6", res.Families)
		}
		iptables(t, tools, m.app, IPv4, "-t", "nat", "-D", "OUTPUT", "-p", "icmp", "-j", "RETURN")
		for f, want := range before {
			if got := natTable(t, tools, m.app, f); got != want {
				t.Errorf("%v after Remove:\n%s\nbefore Apply:\n%s", f, got, want)
			}
		}
		wantReply(t, "after remove", dial(t, m.app, "192.0.2.2:9000"), "peer local=192.0.2.2:9000")

		// Nothing left to remove: nothing done.
		if res := remove(t, tools, m.app); len(res.Families) != 0 {
			t.Fatalf("a second Remove wrote %v", res.Families)
		}
	})
}

func TestFailedRestoreLeavesTheTableAsItWas(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tools Tools) {
		m := newMesh(t)
		apply(t, tools, m.app, testConfig())
		before := natTable(t, tools, m.app, IPv4)

		// A new configuration, with a line the kernel refuses at its end:
		// the flush of the chains, the deleted jumps and the new rules
		// before it must all be undone.
		cfg := testConfig()
		cfg.AppPorts, cfg.ExcludeOutboundPorts = nil, []int{9000}
		p, err := cfg.check()
		if err != nil {
			t.Fatal(err)
		}
		const bad = "-A TRELLIS_OUTBOUND -p tcp -j NO_SUCH_CHAIN"
		in(t, m.app, func() error {
			out, err := tools.save(context.Background(), IPv4)
			if err != nil {
				return err
			}
			input := applyInput(p.rules(IPv4), parseSave(out))
			input = slices.Insert(input, len(input)-1, bad)
			err = tools.restore(context.Background(), IPv4, input)
			// legacy names the line it refuses; nf_tables only the COMMIT.
			var te *ToolError
			if !errors.As(err, &te) || !errors.Is(err, ErrTool) || !strings.Contains(te.Message, "NO_SUCH_CHAIN") ||
				(te.Line != bad && te.Line != "") || (tools.Variant == "legacy" && te.Line != bad) {
				t.Errorf("restore with a bad line: %v, want a *ToolError about it", err)
			}
			t.Logf("the refusal reads: %v", err)
			return nil
		})
		if got := natTable(t, tools, m.app, IPv4); got != before {
			t.Errorf("after a failed restore:\n%s\nbefore:\n%s", got, before)
		}
		wantReply(t, "still redirected", dial(t, m.app, "192.0.2.2:9000"), "proxy-outbound local=127.0.0.1:15001 orig=192.0.2.2:9000")
	})
}

// Without an IPv6 address outside loopback, --ipv6 writes the IPv4 rules
// only, and says so.
func TestIPv6SkippedWithoutAnAddress(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tools Tools) {
		_, app := newNetns(t)
		res := apply(t, tools, app, testConfig())
		if !slices.Equal(res.Families, []Family{IPv4}) || !res.IPv6Skipped {
			t.Fatalf("applied %+v, want IPv4 only, IPv6 skipped", res)
		}
		if got := natTable(t, tools, app, IPv6); strings.Contains(got, "TRELLIS") {
			t.Fatalf("IPv6 rules written:\n%s", got)
		}
	})
}

func TestInNetnsRefusesWhatIsNotANamespace(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/nonexistent/netns", "--netns: open /nonexistent/netns: no such file or directory"},
		{"/etc/hostname", "--netns: /etc/hostname: not a network namespace (a file of nsfs, such as /run/netns/NAME or /proc/PID/ns/net)"},
	} {
		err := InNetns(tc.path, func() error { t.Error("ran in", tc.path); return nil })
		if err == nil || err.Error() != tc.want {
			t.Errorf("InNetns(%s): %v, want %q", tc.path, err, tc.want)
		}
	}
}

// DNS queries to the resolver, over UDP and TCP, reach the server they
// are redirected to, and not the proxy; other UDP is left alone.
func TestDNSIsRedirected(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tools Tools) {
		m := newMesh(t)
		serve(t, m.app, "127.0.0.1:8600", "dns", false)
		var udp net.PacketConn
		in(t, m.app, func() (err error) {
			udp, err = net.ListenPacket("udp", "127.0.0.1:8600")
			return err
		})
		t.Cleanup(func() { udp.Close() })
		go func() {
			buf := make([]byte, 512)
			for {
				n, from, err := udp.ReadFrom(buf)
				if err != nil {
					return
				}
				udp.WriteTo(append([]byte("dns answers "), buf[:n]...), from) //nolint:errcheck // the test reads the answer
			}
		}()

		cfg := testConfig()
		cfg.DNSResolver, cfg.DNSRedirectTo = "192.0.2.2", "127.0.0.1:8600"
		apply(t, tools, m.app, cfg)

		wantReply(t, "DNS over TCP", dial(t, m.app, "192.0.2.2:53"), "dns local=127.0.0.1:8600")
		var answer string
		in(t, m.app, func() error {
			c, err := net.Dial("udp", "192.0.2.2:53")
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
				return err
			}
			if _, err := c.Write([]byte("query")); err != nil {
				return err
			}
			buf := make([]byte, 512)
			n, err := c.Read(buf)
			answer = string(buf[:n])
			return err
		})
		wantReply(t, "DNS over UDP", answer, "dns answers query")
		// Other TCP to the resolver still goes to the proxy.
		wantReply(t, "not DNS", dial(t, m.app, "192.0.2.2:9000"), "proxy-outbound local=127.0.0.1:15001 orig=192.0.2.2:9000")
	})
}

// An IPv6 input that passes iptables-restore --test but that the kernel
// refuses (REDIRECT is not allowed in INPUT): the IPv4 rules, already
// committed by then, are taken back, and neither table changes.
func TestFailedIPv6RestorePutsIPv4Back(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tools Tools) {
		m := newMesh(t)
		iptables(t, tools, m.app, IPv4, "-t", "nat", "-A", "OUTPUT", "-p", "udp", "-j", "RETURN")
		apply(t, tools, m.app, testConfig())
		before := map[Family]string{IPv4: natTable(t, tools, m.app, IPv4), IPv6: natTable(t, tools, m.app, IPv6)}

		cfg := testConfig()
		cfg.AppPorts, cfg.ExcludeOutboundPorts = nil, []int{9000}
		p, err := cfg.check()
		if err != nil {
			t.Fatal(err)
		}
		const bad = "-A INPUT -p tcp -j REDIRECT --to-ports 1"
		in(t, m.app, func() error {
			families := []Family{IPv4, IPv6}
			saved, inputs := map[Family]string{}, map[Family][]string{}
			for _, f := range families {
				out, err := tools.save(context.Background(), f)
				if err != nil {
					return err
				}
				saved[f], inputs[f] = out, applyInput(p.rules(f), parseSave(out))
			}
			inputs[IPv6] = slices.Insert(inputs[IPv6], len(inputs[IPv6])-1, bad)
			err := tools.write(context.Background(), families, saved, inputs)
			if !errors.Is(err, ErrTool) {
				t.Errorf("write with a bad IPv6 line: %v, want a refusal", err)
			}
			t.Logf("the refusal reads: %v", err)
			return nil
		})
		for f, want := range before {
			if got := natTable(t, tools, m.app, f); got != want {
				t.Errorf("%v after the failed write:\n%s\nbefore:\n%s", f, got, want)
			}
		}
		wantReply(t, "still redirected", dial(t, m.app, "192.0.2.2:9000"), "proxy-outbound local=127.0.0.1:15001 orig=192.0.2.2:9000")
	})
}

// ApplyDNS writes the DNS chain alone: queries to any resolver, a
// loopback stub's too, reach the server, the proxy's chains stay as they
// were, and applying it again leaves one set.
func TestApplyDNSRedirectsEveryResolver(t *testing.T) {
	forEachBackend(t, func(t *testing.T, tools Tools) {
		m := newMesh(t)
		serve(t, m.app, "127.0.0.1:8600", "dns", false)
		apply(t, tools, m.app, testConfig())
		before := natTable(t, tools, m.app, IPv4)

		d := DNSRedirect{Resolver: "0.0.0.0/0", To: "127.0.0.1:8600"}
		applyDNS := func() {
			t.Helper()
			in(t, m.app, func() error {
				res, err := tools.ApplyDNS(context.Background(), d)
				if err == nil && !slices.Equal(res.Families, []Family{IPv4}) {
					t.Errorf("ApplyDNS wrote %v, want IPv4", res.Families)
				}
				return err
			})
		}
		applyDNS()
		once := natTable(t, tools, m.app, IPv4)
		applyDNS()
		if got := natTable(t, tools, m.app, IPv4); got != once {
			t.Errorf("after a second ApplyDNS:\n%s\nafter the first:\n%s", got, once)
		}
		if n := strings.Count(once, "-j "+DNSChain+"\n"); n != 1 {
			t.Errorf("%d jumps to %s:\n%s", n, DNSChain, once)
		}
		for line := range strings.Lines(before) {
			if strings.HasPrefix(line, "-A ") && !strings.Contains(once, line) {
				t.Errorf("ApplyDNS dropped %q:\n%s", strings.TrimSpace(line), once)
			}
		}

		wantReply(t, "to a resolver", dial(t, m.app, "192.0.2.2:53"), "dns local=127.0.0.1:8600")
		wantReply(t, "to a loopback stub", dial(t, m.app, "127.0.0.53:53"), "dns local=127.0.0.1:8600")
		wantReply(t, "not DNS", dial(t, m.app, "192.0.2.2:9000"), "proxy-outbound local=127.0.0.1:15001 orig=192.0.2.2:9000")

		// Remove takes it away with the rest.
		remove(t, tools, m.app)
		if got := natTable(t, tools, m.app, IPv4); strings.Contains(got, DNSChain) {
			t.Errorf("after Remove:\n%s", got)
		}
	})
}

// ApplyDNS refuses what it cannot write, naming the flag, and writes
// nothing.
func TestApplyDNSRefuses(t *testing.T) {
	for _, tc := range []struct {
		d    DNSRedirect
		want string
	}{
		{DNSRedirect{}, "--dns-resolver: required: the address whose queries are redirected"},
		{DNSRedirect{Resolver: "0.0.0.0/0"}, "--dns-redirect-to: required with --dns-resolver: the ADDR:PORT of the DNS server queries go to"},
		{DNSRedirect{Resolver: "any", To: "127.0.0.1:8600"}, `--dns-resolver: "any" is not an IP address or a CIDR (10.0.0.2, 0.0.0.0/0 for every resolver)`},
		{DNSRedirect{Resolver: "0.0.0.0/0", To: "[::1]:8600"}, "--dns-redirect-to: [::1]:8600 is not of the family of --dns-resolver 0.0.0.0/0: a query cannot change IP version"},
		{DNSRedirect{Resolver: "10.0.0.0/0", To: "127.0.0.1:8600"}, `--dns-resolver: "10.0.0.0/0" is not an IP address or a CIDR (10.0.0.2, 0.0.0.0/0 for every resolver)`},
	} {
		if _, err := (Tools{}).ApplyDNS(context.Background(), tc.d); err == nil || err.Error() != tc.want || !errors.Is(err, ErrConfig) {
			t.Errorf("ApplyDNS(%+v): %v, want %q", tc.d, err, tc.want)
		}
	}
}
