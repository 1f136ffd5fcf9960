package proxy

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

// inNetnsEnv marks the copy of the test binary that runs inside a fresh
// network namespace (see inOwnNetns).
const inNetnsEnv = "TRELLIS_PROXY_TEST_NETNS"

// inOwnNetns runs the calling test again in a child test binary inside a
// new network namespace, where it may write iptables rules, and reports
// whether the caller is that child (and should go on).
func inOwnNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv(inNetnsEnv) != "" {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: it creates a network namespace and writes iptables rules")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	name := fmt.Sprintf("trellis-proxy-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", name, self, "-test.run", "^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in the namespace: %v\n%s", err, out)
	}
	t.Logf("in the namespace:\n%s", out)
	return false
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// dialFrom connects from the source address src to dst.
func dialFrom(src, dst string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.Dial("tcp", dst)
}

// TestOutboundTransparent: in a namespace of its own, connections from
// the "app" (source 10.9.0.100, which an iptables REDIRECT sends to the
// transparent listener; the proxy's own connections leave from other
// addresses, as the proxy's user skips the rules in a task) reach the
// service whose endpoint they were sent to, over mTLS; an address of no
// service is passed through or closed per outbound.unknown.
func TestOutboundTransparent(t *testing.T) {
	if !inOwnNetns(t) {
		return
	}
	run(t, "ip", "link", "set", "lo", "up")
	for _, a := range []string{"10.9.0.1/32", "10.9.0.2/32", "10.9.0.3/32", "10.9.0.100/32"} {
		run(t, "ip", "addr", "add", a, "dev", "lo")
	}
	run(t, "iptables", "-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-s", "10.9.0.100", "-j", "REDIRECT", "--to-ports", "15001")

	c := newTestCA(t, testTD, time.Now())
	server := tlsEcho(t, c, "counting")
	// A plain server at 10.9.0.2:9002, of no service.
	plain, err := net.Listen("tcp", "10.9.0.2:9002")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	go func() {
		for {
			conn, err := plain.Accept()
			if err != nil {
				return
			}
			io.WriteString(conn, "plain\n")
			conn.Close()
		}
	}()

	p := newTestProxy(t)
	snap := testSnapshot(t, c, "dashboard", "tcp", "127.0.0.1:1")
	snap.Inbound = nil
	counting := countingUpstream(c, server)
	counting.BindAddress = ""
	counting.Endpoints[0].AppAddress = "10.9.0.1:9001" // nothing listens there
	snap.Outbound = &pbproxy.TransparentOutbound{Address: "127.0.0.1:15001", Destinations: []*pbproxy.Upstream{counting}, Unknown: UnknownPassthrough}
	if err := p.Update(snap); err != nil {
		t.Fatal(err)
	}
	runProxy(t, p)
	waitAddr(t, p, outboundComponent)

	// A known destination: over mTLS to counting's endpoint.
	conn, err := dialFrom("10.9.0.100", "10.9.0.1:9001")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "hello\n")
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(io.LimitReader(conn, int64(len(spiffeOf(testTD, "default", "dashboard"))+7)))
	conn.Close()
	if want := spiffeOf(testTD, "default", "dashboard") + "\nhello\n"; err != nil || string(b) != want {
		t.Fatalf("through the transparent listener: %q, %v; want %q", b, err, want)
	}

	// An unknown destination, passed through.
	conn, err = dialFrom("10.9.0.100", "10.9.0.2:9002")
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	b, err = io.ReadAll(conn)
	conn.Close()
	if err != nil || string(b) != "plain\n" {
		t.Fatalf("passthrough: %q, %v", b, err)
	}
	if n := metric(t, p, "trellis_proxy_outbound_unknown_destination_total", "action", "passthrough"); n != 1 {
		t.Errorf("passthrough counted %v, want 1", n)
	}

	// The same, denied: closed without a byte.
	snap.Version = "v2"
	snap.Outbound.Unknown = UnknownDeny
	if err := p.Update(snap); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, p, "trellis_proxy_outbound_unknown_destination_total", "action", "deny") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the unknown destination was never denied")
		}
		conn, err = dialFrom("10.9.0.100", "10.9.0.2:9002")
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		b, err = io.ReadAll(conn)
		conn.Close()
		if err == nil && string(b) == "plain\n" {
			continue // the previous snapshot's table, still
		}
		if err != nil || len(b) != 0 {
			t.Fatalf("denied: %q, %v; want the connection closed", b, err)
		}
	}
}
