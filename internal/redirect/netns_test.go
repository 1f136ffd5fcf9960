package redirect

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The real-namespace tests: network namespaces made with `ip netns`,
// joined by a veth pair, carrying traffic only between themselves.

// dialEnv makes the test binary a dialer (see TestMain): it dials the
// address, prints what the listener answered, and exits. The tests run it
// as another user, which a thread of this process cannot become alone.
const dialEnv = "TRELLIS_REDIRECT_TEST_DIAL"

func TestMain(m *testing.M) {
	if addr := os.Getenv(dialEnv); addr != "" {
		reply, err := dialAndRead(addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(reply)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// needNamespaces skips a test where namespaces and iptables cannot be
// had: not root, or no ip or iptables tools. CI runs as root with them.
func needNamespaces(t *testing.T, tools Tools) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: it creates network namespaces and writes iptables rules")
	}
	for _, name := range []string{"ip", tools.command(IPv4, "restore"), tools.command(IPv4, "save")} {
		if _, err := exec.LookPath(name); err != nil {
			t.Skipf("needs %s (apt-get install iproute2 iptables): %v", name, err)
		}
	}
}

var netnsSeq atomic.Int64

// newNetns creates a network namespace with loopback up, removed when
// the test ends, and returns its name and path.
func newNetns(t *testing.T) (name, path string) {
	t.Helper()
	name = fmt.Sprintf("trellis-rt-%d-%d", os.Getpid(), netnsSeq.Add(1))
	ip(t, "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	ip(t, "-n", name, "link", "set", "lo", "up")
	return name, "/run/netns/" + name
}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// link joins two namespaces with a veth pair, each end up with its
// addresses.
func link(t *testing.T, a string, aAddrs []string, b string, bAddrs []string) {
	t.Helper()
	ip(t, "link", "add", "veth0", "netns", a, "type", "veth", "peer", "name", "veth0", "netns", b)
	for ns, addrs := range map[string][]string{a: aAddrs, b: bAddrs} {
		for _, addr := range addrs {
			args := []string{"-n", ns, "addr", "add", addr, "dev", "veth0"}
			if strings.Contains(addr, ":") {
				args = append(args, "nodad") // usable at once
			}
			ip(t, args...)
		}
		ip(t, "-n", ns, "link", "set", "veth0", "up")
	}
}

// in runs fn in a namespace, failing the test on error.
func in(t *testing.T, path string, fn func() error) {
	t.Helper()
	if err := InNetns(path, fn); err != nil {
		t.Fatal(err)
	}
}

// serve listens on addr in a namespace until the test ends, and answers
// every connection with its label and the address it was accepted on:
// "<label> local=A", and for a proxy, the connection's original
// destination: "<label> local=A orig=B".
func serve(t *testing.T, netns, addr, label string, proxy bool) {
	t.Helper()
	var ln net.Listener
	in(t, netns, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			reply := fmt.Sprintf("%s local=%s", label, c.LocalAddr())
			if proxy {
				dst, err := OriginalDst(c.(*net.TCPConn))
				if err != nil {
					reply += " " + err.Error()
				} else {
					reply += " orig=" + dst.String()
				}
			}
			io.WriteString(c, reply)
			c.Close()
		}
	}()
}

func dialAndRead(addr string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// dial connects from a namespace as this process's user (root).
func dial(t *testing.T, netns, addr string) string {
	t.Helper()
	var reply string
	in(t, netns, func() (err error) {
		reply, err = dialAndRead(addr)
		return err
	})
	return reply
}

// dialAs connects from a namespace as another user and group, in a
// child process started on a thread in that namespace.
func dialAs(t *testing.T, netns, addr string, uid, gid uint32) string {
	t.Helper()
	bin := dialerBinary(t)
	var out []byte
	in(t, netns, func() error {
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), dialEnv+"="+addr)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		var err error
		if out, err = cmd.Output(); err != nil {
			return fmt.Errorf("dialing %s as %d:%d: %v: %s", addr, uid, gid, err, stderr.String())
		}
		return nil
	})
	return string(out)
}

// dialerBinary is a copy of the test binary that any user may run: the
// go command builds it in a directory only root may enter.
func dialerBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "trellis-redirect-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "dialer")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// natTable is the namespace's nat table as the tools save it, without
// the comment lines (they carry the time) and counters.
func natTable(t *testing.T, tools Tools, netns string, f Family) string {
	t.Helper()
	var out string
	in(t, netns, func() (err error) {
		out, err = tools.save(context.Background(), f)
		return err
	})
	var lines []string
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.LastIndex(line, " ["); strings.HasPrefix(line, ":") && i > 0 {
			line = line[:i] + "\n"
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "")
}

// iptables runs one iptables command of tools in a namespace.
func iptables(t *testing.T, tools Tools, netns string, f Family, args ...string) {
	t.Helper()
	name := strings.TrimSuffix(tools.command(f, "x"), "-x")
	in(t, netns, func() error {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return nil
	})
}

func apply(t *testing.T, tools Tools, netns string, cfg Config) Result {
	t.Helper()
	var res Result
	in(t, netns, func() (err error) {
		res, err = tools.Apply(context.Background(), cfg)
		return err
	})
	return res
}

func remove(t *testing.T, tools Tools, netns string) Result {
	t.Helper()
	var res Result
	in(t, netns, func() (err error) {
		res, err = tools.Remove(context.Background())
		return err
	})
	return res
}

// backends are the iptables backends the tests run on: nf_tables (this
// machine's and Debian's default) and legacy.
var backends = []Tools{{Variant: "nft"}, {Variant: "legacy"}}

func forEachBackend(t *testing.T, fn func(t *testing.T, tools Tools)) {
	for _, tools := range backends {
		t.Run(tools.Variant, func(t *testing.T) {
			needNamespaces(t, tools)
			needKernelTables(t, tools)
			fn(t, tools)
		})
	}
}

// needKernelTables skips a backend whose nat tables the kernel does not
// have (legacy iptables needs the ip_tables modules, which a kernel or a
// container may lack); any other failure is the test's to report.
func needKernelTables(t *testing.T, tools Tools) {
	t.Helper()
	_, netns := newNetns(t)
	for _, f := range []Family{IPv4, IPv6} {
		err := InNetns(netns, func() error {
			_, err := tools.save(context.Background(), f)
			return err
		})
		if err != nil && (strings.Contains(err.Error(), "Table does not exist") || strings.Contains(err.Error(), "insmod")) {
			t.Skipf("the kernel has no %v nat table for %s iptables: %v", f, tools.Variant, err)
		}
	}
}

func wantReply(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: got %q, want %q", what, got, want)
	}
}
