package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

// waitFor polls cond until it holds or the test's time runs out.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startInbound starts p with snap and returns its inbound address.
func startInbound(t *testing.T, p *Proxy, snap *pbproxy.Snapshot) string {
	t.Helper()
	if err := p.Update(snap); err != nil {
		t.Fatalf("Update: %v", err)
	}
	runProxy(t, p)
	return waitAddr(t, p, "inbound")
}

// clientTLS presents the leaf certPEM/keyPEM (none when nil), trusts
// roots, and offers protos.
func clientTLS(t testing.TB, certPEM, keyPEM []byte, roots [][]byte, protos ...string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AppendCertsFromPEM(r)
	}
	c := &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: protos,
		// The server's id is checked by ClientTLS in the proxy; here the
		// chain suffices.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: pool})
			return err
		},
	}
	if certPEM != nil {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c
}

// xfccApp is an HTTP app that answers with the X-Forwarded-Client-Cert
// it received.
func xfccApp(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s xfcc=%s", r.Method, r.URL.Path, r.Header.Get(XFCCHeader))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// echoApp is a TCP app that echoes.
func echoApp(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func httpClient(conf *tls.Config) *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: conf, DisableKeepAlives: true}}
}

// http2Client is a client that speaks HTTP/2 alone, over TLS with conf.
func http2Client(conf *tls.Config) *http.Client {
	var h2 http.Protocols
	h2.SetHTTP2(true)
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: conf, Protocols: &h2}}
}

// closedWithoutResponse reads an HTTP/2 connection to its end: it must
// end, with nothing but the server's SETTINGS (what an HTTP/2 server may
// send before the client's preface) and a GOAWAY on it.
func closedWithoutResponse(c *tls.Conn) error {
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return errors.New("the connection stayed open")
	}
	for len(got) > 0 {
		if len(got) < 9 {
			return fmt.Errorf("the proxy sent %q, not HTTP/2 frames", got)
		}
		length := int(got[0])<<16 | int(got[1])<<8 | int(got[2])
		if typ := got[3]; typ != 0x4 && typ != 0x7 { // SETTINGS, GOAWAY
			return fmt.Errorf("the proxy sent an HTTP/2 frame of type %d", typ)
		}
		if len(got) < 9+length {
			return fmt.Errorf("the proxy sent a truncated HTTP/2 frame")
		}
		got = got[9+length:]
	}
	return nil
}

// refusedConn says whether a connection made with conf is refused: the
// handshake fails, or the first read after it ends.
func refusedConn(addr string, conf *tls.Config) error {
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return nil
	}
	defer c.Close()
	return closedWithoutData(c)
}

// TestInboundAttacks is the attack list, a case each: every one
// is refused and counted.
func TestInboundAttacks(t *testing.T) {
	now := time.Now()
	ours := newTestCA(t, testTD, now.Add(-24*time.Hour))
	pruned := newTestCA(t, testTD, now.Add(-24*time.Hour))
	another := newTestCA(t, testTD, now)
	foreign := newTestCA(t, "99999999-2222-3333-4444-555555555555.trellis", now)

	snap := testSnapshot(t, ours, "api", "http", xfccApp(t), ours.rootPEM(), foreign.rootPEM())
	snap.Inbound.Intentions = &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{
		{Namespace: "default", Name: "web", Permissions: []*pbmesh.IntentionPermission{
			{Action: "deny", Http: &pbmesh.IntentionHTTPMatch{PathPrefix: "/admin"}},
			{Action: "allow", Http: &pbmesh.IntentionHTTPMatch{PathPrefix: "/"}},
		}},
	}}
	p, err := New(Config{HeaderTimeout: 300 * time.Millisecond, HandshakeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addr := startInbound(t, p, snap)
	roots := [][]byte{ours.rootPEM()}
	webLeaf, webKey := ours.leaf(t, "default", "web", now, time.Hour)
	st := p.Stats()
	hs := func(reason string) float64 {
		return testutil.ToFloat64(st.HandshakeFailures.WithLabelValues("inbound", reason))
	}
	proto := func(reason string) float64 {
		return testutil.ToFloat64(st.ProtocolErrors.WithLabelValues("inbound", reason))
	}
	denials := func(src, level string) float64 {
		return testutil.ToFloat64(st.IntentionDenials.WithLabelValues(src, level))
	}

	// The allowed call first: the attacks are refused by the checks, not
	// by a proxy that refuses everything.
	resp, err := httpClient(clientTLS(t, webLeaf, webKey, roots)).Get("https://" + addr + "/v1/items")
	if err != nil {
		t.Fatalf("allowed call: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("allowed call: %d %s", resp.StatusCode, body)
	}

	type attack struct {
		name    string
		attack  func(t *testing.T) error
		counter func() float64
	}
	attacks := []attack{
		{"no client certificate", func(t *testing.T) error {
			return refusedConn(addr, clientTLS(t, nil, nil, roots))
		}, func() float64 { return hs(ReasonNoCertificate) }},
		{"a certificate of another CA", func(t *testing.T) error {
			l, k := another.leaf(t, "default", "web", now, time.Hour)
			return refusedConn(addr, clientTLS(t, l, k, roots))
		}, func() float64 { return hs(ReasonUnknownCA) }},
		{"a foreign trust domain", func(t *testing.T) error {
			// Its root is even among the proxy's roots: the trust domain
			// still refuses it.
			l, k := foreign.leaf(t, "default", "web", now, time.Hour)
			return refusedConn(addr, clientTLS(t, l, k, roots))
		}, func() float64 { return hs(ReasonTrustDomain) }},
		{"an expired leaf", func(t *testing.T) error {
			l, k := ours.leaf(t, "default", "web", now.Add(-3*time.Hour), time.Hour)
			return refusedConn(addr, clientTLS(t, l, k, roots))
		}, func() float64 { return hs(ReasonExpired) }},
		{"a leaf chaining to a pruned root", func(t *testing.T) error {
			l, k := pruned.leaf(t, "default", "web", now, time.Hour)
			return refusedConn(addr, clientTLS(t, l, k, roots))
		}, func() float64 { return hs(ReasonUnknownCA) }},
		{"a service the intentions deny", func(t *testing.T) error {
			l, k := ours.leaf(t, "default", "db", now, time.Hour)
			return refusedConn(addr, clientTLS(t, l, k, roots))
		}, func() float64 { return denials("default/db", "l4") }},
		{"a request the L7 rules deny", func(t *testing.T) error {
			resp, err := httpClient(clientTLS(t, webLeaf, webKey, roots)).Get("https://" + addr + "/admin/users")
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				return fmt.Errorf("status %d, want 403", resp.StatusCode)
			}
			if want := "denied by the intention default/web → default/api (permission 0)"; !strings.Contains(string(body), want) {
				return fmt.Errorf("body %q does not say %q", body, want)
			}
			return nil
		}, func() float64 { return denials("default/web", "l7") }},
		{"plaintext", func(t *testing.T) error {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: api\r\n\r\n")
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if n, err := c.Read(make([]byte, 64)); err == nil {
				return fmt.Errorf("the proxy answered %d bytes", n)
			}
			return nil
		}, func() float64 { return hs(ReasonPlaintext) }},
		{"a client silent after connecting", func(t *testing.T) error {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			defer c.Close()
			return closedWithoutData(c)
		}, func() float64 { return hs(ReasonTimeout) }},
		{"a malformed HTTP/2 preface", func(t *testing.T) error {
			c, err := tls.Dial("tcp", addr, clientTLS(t, webLeaf, webKey, roots, "h2"))
			if err != nil {
				return err
			}
			defer c.Close()
			if c.ConnectionState().NegotiatedProtocol != "h2" {
				return errors.New("h2 not negotiated")
			}
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: api\r\n\r\n")
			return closedWithoutResponse(c)
		}, func() float64 { return proto(ReasonHTTP2Preface) }},
		{"a client silent after an HTTP/2 handshake", func(t *testing.T) error {
			c, err := tls.Dial("tcp", addr, clientTLS(t, webLeaf, webKey, roots, "h2"))
			if err != nil {
				return err
			}
			defer c.Close()
			if c.ConnectionState().NegotiatedProtocol != "h2" {
				return errors.New("h2 not negotiated")
			}
			// It never sends its preface: the header timeout closes it.
			return closedWithoutResponse(c)
		}, func() float64 { return proto(ReasonHeaderTimeout) }},
		{"a slowloris client", func(t *testing.T) error {
			c, err := tls.Dial("tcp", addr, clientTLS(t, webLeaf, webKey, roots, "http/1.1"))
			if err != nil {
				return err
			}
			defer c.Close()
			io.WriteString(c, "GET /v1/items HTTP/1.1\r\nHost: api\r\nX-Slow: ")
			// It never ends its headers: the header timeout closes it.
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, err = bufio.NewReader(c).ReadByte()
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				return errors.New("the connection stayed open")
			}
			return nil
		}, func() float64 { return proto(ReasonHeaderTimeout) }},
	}
	// A denied path spelled otherwise is the path it names.
	for _, path := range []string{"/v1/../admin/users", "//admin/users", "/./admin", "/%61dmin/users", "/v1/%2E%2E/admin"} {
		attacks = append(attacks, attack{"the denied path spelled " + path, func(t *testing.T) error {
			code, body, err := rawRequest(addr, clientTLS(t, webLeaf, webKey, roots, "http/1.1"), path)
			if err != nil {
				return err
			}
			if code != http.StatusForbidden {
				return fmt.Errorf("status %d (%q), want 403", code, body)
			}
			return nil
		}, func() float64 { return denials("default/web", "l7") }})
	}
	for _, tc := range attacks {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.counter()
			if err := tc.attack(t); err != nil {
				t.Fatalf("not refused: %v", err)
			}
			waitFor(t, "the refusal to be counted", func() bool { return tc.counter() == before+1 })
		})
	}
}

// TestInboundHTTPAllowed: HTTP/1.1 and HTTP/2 calls of an allowed caller
// reach the app, which sees the caller in X-Forwarded-Client-Cert.
func TestInboundHTTPAllowed(t *testing.T) {
	now := time.Now()
	c := newTestCA(t, testTD, now)
	snap := testSnapshot(t, c, "api", "http", xfccApp(t))
	snap.Inbound.Intentions = allowing("web")
	p := newTestProxy(t)
	addr := startInbound(t, p, snap)
	webLeaf, webKey := c.leaf(t, "default", "web", now, time.Hour)
	cert, _ := tls.X509KeyPair(webLeaf, webKey)
	want := "xfcc=" + XFCC(spiffeOf(testTD, "default", "api"), certHash(cert.Certificate[0]), spiffeOf(testTD, "default", "web"))

	h1 := httpClient(clientTLS(t, webLeaf, webKey, [][]byte{c.rootPEM()}))
	h2 := http2Client(clientTLS(t, webLeaf, webKey, [][]byte{c.rootPEM()}, "h2"))
	// The app gets the path the permissions decided on.
	code, body, err := rawRequest(addr, clientTLS(t, webLeaf, webKey, [][]byte{c.rootPEM()}, "http/1.1"), "/v1//x/../items")
	if err != nil || code != 200 || !strings.HasPrefix(body, "GET /v1/items xfcc=") {
		t.Errorf("a path to normalize: %d %q %v, want the app to see /v1/items", code, body, err)
	}
	for name, client := range map[string]*http.Client{"HTTP/1.1": h1, "HTTP/2": h2} {
		req, _ := http.NewRequest("POST", "https://"+addr+"/v1/items", strings.NewReader("x"))
		// A caller's own XFCC is replaced, not passed on.
		req.Header.Set(XFCCHeader, "By=spiffe://forged;URI=spiffe://forged")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "POST /v1/items "+want {
			t.Errorf("%s: %d %q, want 200 %q", name, resp.StatusCode, body, "POST /v1/items "+want)
		}
		if wantProto := map[string]int{"HTTP/1.1": 1, "HTTP/2": 2}[name]; resp.ProtoMajor != wantProto {
			t.Errorf("%s: answered over HTTP/%d", name, resp.ProtoMajor)
		}
	}
	if got := testutil.ToFloat64(p.Stats().Requests.WithLabelValues("inbound", "200")); got != 3 {
		t.Errorf("requests counted with code 200: %v, want 3", got)
	}
}

// TestInboundTCPClosedWhenDenied: an allowed TCP connection carries
// bytes to the app and back; a snapshot whose intentions deny its peer
// closes it, and a new one is refused.
func TestInboundTCPClosedWhenDenied(t *testing.T) {
	now := time.Now()
	c := newTestCA(t, testTD, now)
	snap := testSnapshot(t, c, "api", "tcp", echoApp(t))
	snap.Inbound.Intentions = allowing("web")
	p := newTestProxy(t)
	addr := startInbound(t, p, snap)
	webLeaf, webKey := c.leaf(t, "default", "web", now, time.Hour)
	conf := clientTLS(t, webLeaf, webKey, [][]byte{c.rootPEM()})
	conn, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 5)
	io.WriteString(conn, "hello")
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo: %q %v", buf, err)
	}
	denied := proto.Clone(snap).(*pbproxy.Snapshot)
	denied.Version = "v2"
	denied.Inbound.Intentions = &pbmesh.Intentions{Sources: []*pbmesh.IntentionSource{{Namespace: "default", Name: "web", Action: "deny"}}}
	if err := p.Update(denied); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Read(buf); err == nil {
		t.Fatal("the denied connection still carries data")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the denied connection stayed open")
	}
	if got := testutil.ToFloat64(p.Stats().ConnectionsClosedBySnapshot); got != 1 {
		t.Errorf("connections closed by the snapshot: %v, want 1", got)
	}
	if err := refusedConn(addr, conf); err != nil {
		t.Errorf("a new connection: %v", err)
	}
	if got := testutil.ToFloat64(p.Stats().IntentionDenials.WithLabelValues("default/web", "l4")); got != 1 {
		t.Errorf("l4 denials of default/web: %v, want 1", got)
	}
}

// rawRequest sends a GET of path, written as is, over a new connection.
func rawRequest(addr string, conf *tls.Config, path string) (int, string, error) {
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: api\r\nConnection: close\r\n\r\n", path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// closedWithoutData says whether the proxy closes c without sending
// anything: an error when it sends data, or keeps c open for 20 s.
func closedWithoutData(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		return errors.New("the proxy sent data")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return errors.New("the connection stayed open")
	}
	return nil
}
