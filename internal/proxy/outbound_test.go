package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

// tlsEcho is a server holding a leaf of ns/svc of c, that requires a
// client certificate chaining to c's root, answers each connection with
// the client's SPIFFE id on a line, then echoes what it reads.
func tlsEcho(t *testing.T, c *testCA, svc string) string {
	t.Helper()
	certPEM, keyPEM := c.leaf(t, "default", svc, time.Now(), time.Hour)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: roots,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				tc := conn.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					return
				}
				fmt.Fprintf(conn, "%s\n", tc.ConnectionState().PeerCertificates[0].URIs[0])
				io.Copy(conn, conn)
			}()
		}
	}()
	return ln.Addr().String()
}

// deadAddr is an address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// runProxy runs p until the test ends.
func runProxy(t *testing.T, p *Proxy) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// waitAddr waits until component listens, and returns its address.
func waitAddr(t *testing.T, p *Proxy, component string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Addr(component) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("%s never listened", component)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return p.Addr(component).String()
}

func countingUpstream(c *testCA, endpoints ...string) *pbproxy.Upstream {
	u := &pbproxy.Upstream{Namespace: "default", Service: "counting", BindAddress: "127.0.0.1:0", Protocol: "tcp",
		SpiffeId: spiffeOf(c.td, "default", "counting"), LoadBalancer: "round_robin"}
	for i, e := range endpoints {
		u.Endpoints = append(u.Endpoints, &pbproxy.Endpoint{Instance: fmt.Sprintf("counting-%d", i), Address: e})
	}
	return u
}

// call connects to addr, sends a line, and returns the server's first
// line (the SPIFFE id it saw) and the echo.
func call(addr, msg string) (peer, echo string, err error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		return "", "", err
	}
	r := bufio.NewReader(c)
	if peer, err = r.ReadString('\n'); err != nil {
		return "", "", fmt.Errorf("reading the peer: %w", err)
	}
	if echo, err = r.ReadString('\n'); err != nil {
		return "", "", fmt.Errorf("reading the echo: %w", err)
	}
	return strings.TrimSpace(peer), strings.TrimSpace(echo), nil
}

func TestOutboundExplicitUpstream(t *testing.T) {
	c := newTestCA(t, testTD, time.Now())
	server := tlsEcho(t, c, "counting")
	p := newTestProxy(t)
	snap := testSnapshot(t, c, "dashboard", "tcp", "127.0.0.1:1")
	snap.Upstreams = []*pbproxy.Upstream{countingUpstream(c, server)}
	if err := p.Update(snap); err != nil {
		t.Fatal(err)
	}
	runProxy(t, p)
	addr := waitAddr(t, p, "upstream default/counting")
	for i := range 3 {
		peer, echo, err := call(addr, fmt.Sprint("hello ", i))
		if err != nil {
			t.Fatal(err)
		}
		if want := spiffeOf(testTD, "default", "dashboard"); peer != want {
			t.Errorf("the server saw %s, want %s", peer, want)
		}
		if echo != fmt.Sprint("hello ", i) {
			t.Errorf("echo %q", echo)
		}
	}
	if n := testutil.ToFloat64(p.stats.Connections.WithLabelValues("127.0.0.1:0")); n != 3 {
		t.Errorf("connections counted: %v, want 3", n)
	}
}

func TestOutboundRefusesAServerWithAnotherSPIFFEID(t *testing.T) {
	c := newTestCA(t, testTD, time.Now())
	impostor := tlsEcho(t, c, "billing") // a valid leaf, of another service
	other := newTestCA(t, "99999999-2222-3333-4444-555555555555.trellis", time.Now())
	foreign := tlsEcho(t, other, "counting") // the right name, another CA
	for _, tc := range []struct {
		name, server, reason string
	}{
		{"another service", impostor, ReasonSPIFFE},
		{"another CA", foreign, ReasonUnknownCA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestProxy(t)
			snap := testSnapshot(t, c, "dashboard", "tcp", "127.0.0.1:1")
			snap.Upstreams = []*pbproxy.Upstream{countingUpstream(c, tc.server)}
			if err := p.Update(snap); err != nil {
				t.Fatal(err)
			}
			runProxy(t, p)
			_, _, err := call(waitAddr(t, p, "upstream default/counting"), "hello")
			if err == nil {
				t.Fatal("the call went through")
			}
			if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "reset") {
				t.Errorf("call: %v, want the connection closed", err)
			}
			if n := testutil.ToFloat64(p.stats.HandshakeFailures.WithLabelValues(outboundComponent, tc.reason)); n != 1 {
				t.Errorf("handshake failures (%s): %v, want 1", tc.reason, n)
			}
		})
	}
}

func TestOutboundRetriesAndEjectsADeadEndpoint(t *testing.T) {
	c := newTestCA(t, testTD, time.Now())
	server := tlsEcho(t, c, "counting")
	p := newTestProxy(t)
	snap := testSnapshot(t, c, "dashboard", "tcp", "127.0.0.1:1")
	snap.Upstreams = []*pbproxy.Upstream{countingUpstream(c, deadAddr(t), server)}
	if err := p.Update(snap); err != nil {
		t.Fatal(err)
	}
	runProxy(t, p)
	addr := waitAddr(t, p, "upstream default/counting")
	// Round robin tries the dead endpoint first each time, and the live
	// one on retry, until the dead one is ejected after 5 failures.
	for i := range 10 {
		if _, echo, err := call(addr, "hi"); err != nil || echo != "hi" {
			t.Fatalf("call %d: %q, %v", i, echo, err)
		}
	}
	if n := metric(t, p, "trellis_proxy_upstream_connect_failures_total", "upstream", "default/counting", "reason", "dial"); n != 5 {
		t.Errorf("connect failures: %v, want 5", n)
	}
	if n := metric(t, p, "trellis_proxy_upstream_ejections_total", "upstream", "default/counting"); n != 1 {
		t.Errorf("ejections: %v, want 1", n)
	}
}

// metric is the value of the counter or gauge name with the given label
// pairs in p's registry, 0 when absent.
func metric(t *testing.T, p *Proxy, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := p.stats.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestOutboundConnectTimeout: an endpoint that accepts TCP but never
// answers the TLS handshake is given up after the upstream's connect
// timeout, and the connection goes to the next endpoint.
func TestOutboundConnectTimeout(t *testing.T) {
	c := newTestCA(t, testTD, time.Now())
	server := tlsEcho(t, c, "counting")
	stall, err := net.Listen("tcp", "127.0.0.1:0") // accepts (the backlog), never speaks
	if err != nil {
		t.Fatal(err)
	}
	defer stall.Close()
	p := newTestProxy(t)
	snap := testSnapshot(t, c, "dashboard", "tcp", "127.0.0.1:1")
	up := countingUpstream(c, stall.Addr().String(), server)
	up.ConnectTimeoutMs = 100
	snap.Upstreams = []*pbproxy.Upstream{up}
	if err := p.Update(snap); err != nil {
		t.Fatal(err)
	}
	runProxy(t, p)
	if _, echo, err := call(waitAddr(t, p, "upstream default/counting"), "hi"); err != nil || echo != "hi" {
		t.Fatalf("call: %q, %v", echo, err)
	}
	if n := metric(t, p, "trellis_proxy_upstream_connect_failures_total", "upstream", "default/counting", "reason", ReasonHandshake); n != 1 {
		t.Errorf("handshake timeouts counted: %v, want 1", n)
	}
}
