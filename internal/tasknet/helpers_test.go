package tasknet

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/netns"
)

// requireCNI skips a test that needs root and the plugins where they are
// truly absent, saying which; with TRELLIS_REQUIRE_CNI set (CI installs
// the plugins) it fails instead.
func requireCNI(t *testing.T) {
	t.Helper()
	reason := ""
	if os.Geteuid() != 0 {
		reason = "needs root (namespaces, veths, iptables)"
	} else if err := Probe(DefaultConfig("/")); err != nil {
		reason = err.Error()
	}
	if reason == "" {
		return
	}
	if os.Getenv("TRELLIS_REQUIRE_CNI") != "" {
		t.Fatalf("TRELLIS_REQUIRE_CNI is set, but: %s", reason)
	}
	t.Skip(reason)
}

// testHost is a network namespace that stands in for the host: the
// bridge, the veths and the iptables rules of a test are made in it, so
// that a test counts exactly what it made and never touches the
// machine's own network (other tests, Docker).
type testHost struct {
	t    *testing.T
	path string
	dir  string
}

func newTestHost(t *testing.T) *testHost {
	t.Helper()
	requireCNI(t)
	dir := t.TempDir()
	h := &testHost{t: t, path: filepath.Join(dir, "host"), dir: dir}
	if err := netns.Create(h.path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netns.Remove(h.path); err != nil {
			t.Error(err)
		}
	})
	h.run("ip", "link", "set", "lo", "up")
	return h
}

// do runs fn in the test host: plugins exec'd from fn run there too.
func (h *testHost) do(fn func() error) {
	h.t.Helper()
	if err := netns.Do(h.path, fn); err != nil {
		h.t.Fatal(err)
	}
}

// run runs a command in the test host and returns its output.
func (h *testHost) run(name string, args ...string) string {
	h.t.Helper()
	var out []byte
	h.do(func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return nil
	})
	return string(out)
}

// network is a Network of the test host, its state in the test's dir.
func (h *testHost) network(mutate ...func(*Config)) *Network {
	h.t.Helper()
	c := DefaultConfig(filepath.Join(h.dir, "net"))
	for _, m := range mutate {
		m(&c)
	}
	n, err := New(c, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (h *testHost) setup(n *Network, req Request) Attachment {
	h.t.Helper()
	var att Attachment
	h.do(func() (err error) {
		att, err = n.Setup(context.Background(), req)
		return err
	})
	return att
}

func (h *testHost) teardown(n *Network, att Attachment) {
	h.t.Helper()
	h.do(func() error { return n.Teardown(context.Background(), att) })
}

// listen starts a TCP echo-our-address server in the namespace at path
// (the test host or a task's) and returns its address.
func listenIn(t *testing.T, path, addr string) string {
	t.Helper()
	var ln net.Listener
	if err := netns.Do(path, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Says who called: the address the connection came from.
			fmt.Fprintf(c, "%s\n", c.RemoteAddr())
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// callFrom connects from the namespace at path to addr and returns what
// the server said (the caller's address as it saw it).
func callFrom(t *testing.T, path, addr string) (string, error) {
	t.Helper()
	var conn net.Conn
	if err := netns.Do(path, func() (err error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		conn, err = d.DialContext(context.Background(), "tcp", addr)
		return err
	}); err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

// peer is a namespace joined to the test host by a veth, on a network of
// its own (198.18.0.0/30, the benchmarking range): an outside address
// that a task reaches through the host's routing and NAT.
func (h *testHost) peer() (path string, peerAddr, hostAddr netip.Addr) {
	h.t.Helper()
	path = filepath.Join(h.dir, "peer")
	if err := netns.Create(path); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = netns.Remove(path) })
	h.run("ip", "link", "add", "tpeer0", "type", "veth", "peer", "name", "eth0", "netns", path)
	h.run("ip", "addr", "add", "198.18.0.1/30", "dev", "tpeer0")
	h.run("ip", "link", "set", "tpeer0", "up")
	if err := netns.Do(path, func() error {
		for _, args := range [][]string{
			{"link", "set", "lo", "up"},
			{"addr", "add", "198.18.0.2/30", "dev", "eth0"},
			{"link", "set", "eth0", "up"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v: %v: %s", args, err, out)
			}
		}
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	return path, netip.MustParseAddr("198.18.0.2"), netip.MustParseAddr("198.18.0.1")
}

func exec_(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }
