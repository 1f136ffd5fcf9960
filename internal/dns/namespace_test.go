package dns

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	miekg "github.com/miekg/dns"

	"trellis.dev/trellis/internal/netns"
)

func TestParseResolvConf(t *testing.T) {
	got := ParseResolvConf([]byte("# made by hand\nsearch example.com\nnameserver 10.0.0.2\nnameserver  fd00::53 \noptions ndots:2\nnameserver dns.example\nnameserver\n"))
	want := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.2:53"), netip.MustParseAddrPort("[fd00::53]:53")}
	if !slices.Equal(got, want) {
		t.Errorf("ParseResolvConf = %v, want %v", got, want)
	}
}

func TestParseRecursor(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "10.0.0.2", want: "10.0.0.2:53"},
		{in: "10.0.0.2:5353", want: "10.0.0.2:5353"},
		{in: "fd00::2", want: "[fd00::2]:53"},
		{in: "[fd00::2]:53", want: "[fd00::2]:53"},
		{in: "dns.example", err: `-dns-recursor: "dns.example" is not an IP address or ADDR:PORT (10.0.0.2, 10.0.0.2:53, [fd00::2]:53)`},
		{in: "10.0.0.2:0", err: `-dns-recursor: "10.0.0.2:0": the port must be 1 to 65535`},
		{in: "10.0.0.2:99999", err: `-dns-recursor: "10.0.0.2:99999" is not an IP address or ADDR:PORT (10.0.0.2, 10.0.0.2:53, [fd00::2]:53)`},
	} {
		got, err := ParseRecursor("-dns-recursor", tc.in)
		switch {
		case tc.err != "" && (err == nil || err.Error() != tc.err):
			t.Errorf("ParseRecursor(%q) = %v, %v; want the error %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got.String() != tc.want):
			t.Errorf("ParseRecursor(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// In a namespace of its own, the listener answers the zone from the
// catalog, and another name REFUSED without recursors, SERVFAIL when no
// recursor answers; its sockets are gone once closed.
func TestServeNamespaceWithoutRecursors(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes a network namespace")
	}
	path := filepath.Join(t.TempDir(), "ns")
	if err := netns.Create(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(path) })
	if out, err := exec.Command("nsenter", "--net="+path, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("bring lo up: %v: %s", err, out)
	}
	s, err := NewServer(Config{Addr: "127.0.0.1:0", Catalog: testCatalog})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(l *NamespaceListener, network, name string) int {
		t.Helper()
		var r *miekg.Msg
		err := netns.Do(path, func() error {
			m := new(miekg.Msg)
			m.SetQuestion(name, miekg.TypeA)
			var err error
			r, _, err = (&miekg.Client{Net: network, Timeout: 10 * time.Second}).Exchange(m, l.Addr().String()) // above the server's own forward timeout, which it answers SERVFAIL at
			return err
		})
		if err != nil {
			t.Fatalf("%s %s: %v", network, name, err)
		}
		return r.Rcode
	}
	// A recursor that never answers: a UDP socket nobody reads, on the
	// host; over TCP, a closed port.
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	for _, tc := range []struct {
		recursors []netip.AddrPort
		outside   int
	}{
		{nil, miekg.RcodeRefused},
		{[]netip.AddrPort{silent.LocalAddr().(*net.UDPAddr).AddrPort()}, miekg.RcodeServerFailure},
	} {
		l, err := s.ServeNamespace(path, 0, tc.recursors)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Addr().Addr().IsLoopback() {
			t.Errorf("listens on %s, want loopback", l.Addr())
		}
		if rc := ask(l, "udp", "api.service.trellis."); rc != miekg.RcodeSuccess {
			t.Errorf("recursors %v: zone name %s", tc.recursors, miekg.RcodeToString[rc])
		}
		if rc := ask(l, "udp", "outside.example."); rc != tc.outside {
			t.Errorf("recursors %v: outside name %s, want %s", tc.recursors, miekg.RcodeToString[rc], miekg.RcodeToString[tc.outside])
		}
		l.Close()
		err = netns.Do(path, func() error {
			c, err := net.Dial("tcp", l.Addr().String())
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			t.Errorf("still listening on %s in the namespace once closed", l.Addr())
		}
	}
}
