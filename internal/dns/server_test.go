package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	miekg "github.com/miekg/dns"
)

// startServer serves cat on a free loopback port until the test ends.
func startServer(t *testing.T, cat Catalog) string {
	t.Helper()
	s, err := NewServer(Config{Addr: "127.0.0.1:0", Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Start: %v", err)
	}
	return s.Addr()
}

func exchange(t *testing.T, net, addr string, m *miekg.Msg) *miekg.Msg {
	t.Helper()
	c := &miekg.Client{Net: net, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s query %v: %v", net, m.Question, err)
	}
	return r
}

// bigCatalog has a service of n passing instances.
func bigCatalog(n int) fakeCatalog {
	c := fakeCatalog{services: map[string][]Endpoint{}}
	for i := range n {
		c.services["default/big"] = append(c.services["default/big"],
			Endpoint{Name: fmt.Sprint("big-", i), Addr: netip.AddrFrom4([4]byte{10, 9, byte(i / 256), byte(i % 256)}), Port: 80, Passing: true})
	}
	return c
}

// The same answers over UDP and TCP, from one address.
func TestServerAnswersOverUDPAndTCP(t *testing.T) {
	addr := startServer(t, testCatalog)
	for _, n := range []string{"udp", "tcp"} {
		r := exchange(t, n, addr, query("api.service.trellis.", miekg.TypeSRV))
		if r.Rcode != miekg.RcodeSuccess || len(r.Answer) != 4 || len(r.Extra) != 3 || r.Truncated {
			t.Errorf("%s SRV: %v", n, r)
		}
		r = exchange(t, n, addr, query("nope.service.trellis.", miekg.TypeA))
		if r.Rcode != miekg.RcodeNameError {
			t.Errorf("%s unknown name: %s; want NXDOMAIN", n, miekg.RcodeToString[r.Rcode])
		}
	}
}

// An answer too big for UDP is cut to 512 bytes (or the client's EDNS0
// size) with TC set; the same question over TCP gets it whole.
func TestServerTruncatesOverUDP(t *testing.T) {
	addr := startServer(t, bigCatalog(200))
	q := query("big.service.trellis.", miekg.TypeA)
	r := exchange(t, "udp", addr, q)
	r.Compress = true // as sent, to measure it
	if !r.Truncated || r.Len() > miekg.MinMsgSize || len(r.Answer) == 0 || len(r.Answer) >= 200 {
		t.Errorf("UDP: truncated %v, %d bytes, %d records; want TC, at most 512 bytes, some records", r.Truncated, r.Len(), len(r.Answer))
	}
	q.SetEdns0(4096, false)
	r = exchange(t, "udp", addr, q)
	r.Compress = true
	if !r.Truncated || r.Len() > MaxUDPSize || r.Len() <= miekg.MinMsgSize {
		t.Errorf("UDP with EDNS0 4096: truncated %v, %d bytes; want TC and at most %d bytes, more than 512", r.Truncated, r.Len(), MaxUDPSize)
	}
	r = exchange(t, "tcp", addr, query("big.service.trellis.", miekg.TypeA))
	if r.Truncated || len(r.Answer) != 200 {
		t.Errorf("TCP: truncated %v, %d records; want all 200", r.Truncated, len(r.Answer))
	}
}

// rawUDP sends b and returns the reply's header, or nil when none came.
func rawUDP(t *testing.T, addr string, b []byte) *miekg.Msg {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	m := new(miekg.Msg)
	if err := m.Unpack(buf[:n]); err != nil {
		t.Fatalf("reply does not unpack: %v", err)
	}
	return m
}

// Queries the server cannot read are FORMERR, one outside the zone is
// REFUSED, and the server answers the next query as before.
func TestServerRefusesBadQueriesAndKeepsServing(t *testing.T) {
	addr := startServer(t, testCatalog)
	good, err := query("api.service.trellis.", miekg.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	// A name of 300 labels: packed by hand, since it is over the 255
	// bytes a name may have and no packer makes it.
	long := append([]byte(nil), good[:12]...)
	for range 300 {
		long = append(long, 1, 'a')
	}
	long = append(long, 0, 0, 1, 0, 1)
	twoQuestions := query("api.service.trellis.", miekg.TypeA)
	twoQuestions.Question = append(twoQuestions.Question, twoQuestions.Question[0])
	two, err := twoQuestions.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		b     []byte
		rcode int
	}{
		{"a truncated packet", good[:len(good)-3], miekg.RcodeFormatError},
		{"a name of 300 labels", long, miekg.RcodeFormatError},
		{"two questions", two, miekg.RcodeFormatError},
	} {
		r := rawUDP(t, addr, tc.b)
		if r == nil || r.Rcode != tc.rcode {
			t.Errorf("%s: reply %v; want %s", tc.name, r, miekg.RcodeToString[tc.rcode])
		}
		if r := exchange(t, "udp", addr, query("api.service.trellis.", miekg.TypeA)); r.Rcode != miekg.RcodeSuccess || len(r.Answer) != 2 {
			t.Fatalf("after %s: %v", tc.name, r)
		}
	}
	if r := rawUDP(t, addr, good[:5]); r != nil {
		t.Errorf("a packet shorter than a header got %v; want no reply (it could amplify)", r)
	}
	for _, n := range []string{"udp", "tcp"} {
		if r := exchange(t, n, addr, query("example.com.", miekg.TypeA)); r.Rcode != miekg.RcodeRefused {
			t.Errorf("%s: a name outside trellis.: %s; want REFUSED", n, miekg.RcodeToString[r.Rcode])
		}
	}
	// TCP: a truncated message, then a good one on a new connection.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	bad := good[:len(good)-3]
	_, _ = c.Write(append([]byte{0, byte(len(bad))}, bad...))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	dc := &miekg.Conn{Conn: c}
	if r, err := dc.ReadMsg(); err != nil || r.Rcode != miekg.RcodeFormatError {
		t.Errorf("TCP truncated packet: %v, %v; want FORMERR", r, err)
	}
	c.Close()
	if r := exchange(t, "tcp", addr, query("api.service.trellis.", miekg.TypeA)); r.Rcode != miekg.RcodeSuccess {
		t.Errorf("TCP after a bad query: %v", r)
	}
}

func TestCheckAddr(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8600":  "",
		":8600":           "",
		"[::1]:53":        "",
		"127.0.0.1:0":     "",
		"localhost:8600":  "must be an IP address",
		"127.0.0.1":       "is not host:port",
		"127.0.0.1:x":     "port must be a number",
		"127.0.0.1:70000": "port must be a number",
	} {
		err := CheckAddr("-dns-addr", addr)
		if (want == "") != (err == nil) || err != nil && (!strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "-dns-addr: ")) {
			t.Errorf("CheckAddr(%q) = %v; want %q", addr, err, want)
		}
	}
}

// revCatalog is a catalog that says when it changes.
type revCatalog struct {
	mu  sync.Mutex
	cat fakeCatalog
	rev uint64
}

func (c *revCatalog) get() fakeCatalog { c.mu.Lock(); defer c.mu.Unlock(); return c.cat }
func (c *revCatalog) Service(ns, name string) ([]Endpoint, bool) {
	return c.get().Service(ns, name)
}
func (c *revCatalog) Instance(name string) (netip.Addr, bool) { return c.get().Instance(name) }
func (c *revCatalog) Synced() bool                            { return true }
func (c *revCatalog) Revision() uint64                        { c.mu.Lock(); defer c.mu.Unlock(); return c.rev }
func (c *revCatalog) set(cat fakeCatalog, rev uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cat, c.rev = cat, rev
}

// Replies are kept per revision of the catalog: a repeated question gets
// the same records under its own id and case, and a new revision is
// answered anew.
func TestServerKeepsRepliesOfARevision(t *testing.T) {
	one := fakeCatalog{services: map[string][]Endpoint{"default/api": {ep("api-1", "10.0.0.1", 80, true)}}}
	two := fakeCatalog{services: map[string][]Endpoint{"default/api": {ep("api-2", "10.0.0.2", 80, true)}}}
	cat := &revCatalog{cat: one, rev: 1}
	addr := startServer(t, cat)
	ask := func(name string) (*miekg.Msg, string) {
		q := query(name, miekg.TypeA)
		r := exchange(t, "udp", addr, q)
		if r.Id != q.Id || len(r.Answer) != 1 || r.Question[0].Name != name || r.Answer[0].Header().Name != name {
			t.Fatalf("%s: %v", name, r)
		}
		return r, r.Answer[0].(*miekg.A).A.String()
	}
	for range 3 {
		if _, a := ask("api.service.trellis."); a != "10.0.0.1" {
			t.Fatalf("revision 1: %s", a)
		}
	}
	if _, a := ask("API.service.trellis."); a != "10.0.0.1" {
		t.Fatalf("revision 1, upper case: %s", a)
	}
	cat.set(two, 2)
	for range 3 {
		if _, a := ask("api.service.trellis."); a != "10.0.0.2" {
			t.Fatalf("revision 2: %s; want the new instance", a)
		}
	}
}
