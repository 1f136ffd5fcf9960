package tasknet

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/netns"
)

// A task's namespace has its address on eth0, the default route through
// the bridge, loopback up, reaches a listener of the host through the
// bridge and an outside address through the host's NAT.
func TestSetupGivesTheTaskANetwork(t *testing.T) {
	h := newTestHost(t)
	n := h.network()
	att := h.setup(n, Request{TaskUID: "T1"})

	if att.Path != n.Config().NetnsPath("T1") || !netns.Is(att.Path) {
		t.Fatalf("path %q: not the task's mounted namespace", att.Path)
	}
	subnet := netip.MustParsePrefix(DefaultSubnet)
	if !subnet.Contains(att.Address.Addr()) || att.Address.Bits() != subnet.Bits() || att.Gateway != netip.MustParseAddr("172.26.64.1") {
		t.Fatalf("address %s gateway %s: want one of %s through 172.26.64.1", att.Address, att.Gateway, subnet)
	}

	if err := netns.Do(att.Path, func() error {
		eth0, err := net.InterfaceByName(IfName)
		if err != nil {
			return err
		}
		addrs, _ := eth0.Addrs()
		found := false
		for _, a := range addrs {
			found = found || a.String() == att.Address.String()
		}
		if !found || eth0.Flags&net.FlagUp == 0 {
			t.Errorf("eth0 %v %v: want %s, up", eth0.Flags, addrs, att.Address)
		}
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		if lo.Flags&net.FlagUp == 0 {
			t.Errorf("loopback is down")
		}
		routes, err := os.Open("/proc/thread-self/net/route")
		if err != nil {
			return err
		}
		defer routes.Close()
		rs, err := parseRoutes(routes)
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r.Prefix.Bits() == 0 && r.Interface == IfName {
				return nil
			}
		}
		t.Errorf("no default route through eth0: %v", rs)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Loopback carries traffic in the namespace.
	lo := listenIn(t, att.Path, "127.0.0.1:0")
	if who, err := callFrom(t, att.Path, lo); err != nil || !strings.HasPrefix(who, "127.0.0.1:") {
		t.Fatalf("loopback call: %q, %v", who, err)
	}
	// The host, on the bridge's address: the caller is the task's address.
	hostSide := listenIn(t, h.path, "172.26.64.1:0")
	if who, err := callFrom(t, att.Path, hostSide); err != nil || !strings.HasPrefix(who, att.Address.Addr().String()+":") {
		t.Fatalf("call to the host: %q, %v; want from %s", who, err, att.Address.Addr())
	}
	// An outside address: the host routes it and masquerades the task
	// behind its own address on that network.
	peer, peerAddr, hostAddr := h.peer()
	outside := listenIn(t, peer, netip.AddrPortFrom(peerAddr, 0).String())
	if who, err := callFrom(t, att.Path, outside); err != nil || !strings.HasPrefix(who, hostAddr.String()+":") {
		t.Fatalf("call to the outside: %q, %v; want from the host's %s (NAT)", who, err, hostAddr)
	}

	h.teardown(n, att)
	if _, err := os.Lstat(att.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("namespace mount point after teardown: %v", err)
	}
	h.teardown(n, att) // idempotent
}

// Published ports: a host port given and one the agent picks, TCP and
// UDP, reached from the host at 127.0.0.1 and at its address on another
// network.
func TestPublishedPortsReachTheTask(t *testing.T) {
	h := newTestHost(t)
	n := h.network()
	fixed := freePort(t, h)
	att := h.setup(n, Request{TaskUID: "T2", Ports: []Port{
		{Name: "http", ContainerPort: 8080, HostPort: fixed},
		{Name: "admin", ContainerPort: 9090},
		{Name: "dns", ContainerPort: 5353, Protocol: UDP},
	}})
	if len(att.Ports) != 3 || att.Ports[0].HostPort != fixed || att.Ports[1].HostPort == 0 || att.Ports[2].HostPort == 0 || att.Ports[2].Protocol != UDP || att.Ports[0].Protocol != TCP {
		t.Fatalf("ports %+v: want %d, then chosen ones", att.Ports, fixed)
	}
	listenIn(t, att.Path, ":8080")
	listenIn(t, att.Path, ":9090")
	_, _, hostAddr := h.peer()
	for _, p := range att.Ports[:2] {
		for _, host := range []string{"127.0.0.1", hostAddr.String()} {
			addr := net.JoinHostPort(host, strconv.Itoa(p.HostPort))
			if who, err := callFrom(t, h.path, addr); err != nil || who == "" {
				t.Errorf("%s (-> %d): %q, %v", addr, p.ContainerPort, who, err)
			}
		}
	}

	// UDP: a datagram to the host port arrives in the task, which answers.
	var pc net.PacketConn
	if err := netns.Do(att.Path, func() (err error) { pc, err = net.ListenPacket("udp", ":5353"); return err }); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("got "), buf[:k]...), from)
		}
	}()
	h.do(func() error {
		c, err := net.Dial("udp", net.JoinHostPort(hostAddr.String(), strconv.Itoa(att.Ports[2].HostPort)))
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 64)
		k, err := c.Read(buf)
		if err != nil || string(buf[:k]) != "got ping" {
			t.Errorf("udp answer %q, %v", buf[:k], err)
		}
		return nil
	})
	h.teardown(n, att)
	if out := h.run("iptables-save", "-t", "nat"); strings.Contains(out, strconv.Itoa(att.Ports[1].HostPort)) {
		t.Fatalf("the port's rules outlive the task:\n%s", out)
	}
}

// freePort is a TCP port free in the test host.
func freePort(t *testing.T, h *testHost) int {
	var port int
	h.do(func() error {
		sock, p, err := listenPort(TCP, 0)
		if err == nil {
			port = p
			sock.Close()
		}
		return err
	})
	return port
}

// What cannot be set up is refused naming the field, and leaves nothing.
func TestSetupRefusals(t *testing.T) {
	h := newTestHost(t)
	n := h.network()
	busy := freePort(t, h)
	var ln net.Listener
	h.do(func() (err error) { ln, err = net.Listen("tcp", ":"+strconv.Itoa(busy)); return err })
	defer ln.Close()
	a := h.setup(n, Request{TaskUID: "OWNER", Ports: []Port{{ContainerPort: 80, HostPort: busy + 1}}})

	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{TaskUID: "../x"}, `task uid "../x" cannot name a CNI container`},
		{Request{TaskUID: "T", Ports: []Port{{ContainerPort: 0}}}, "ports[0].container_port: 0 is not a port"},
		{Request{TaskUID: "T", Ports: []Port{{ContainerPort: 80, HostPort: busy}}}, "ports[0].host_port: " + strconv.Itoa(busy) + "/tcp is in use on this host"},
		{Request{TaskUID: "T", Ports: []Port{{ContainerPort: 81}, {ContainerPort: 80, HostPort: busy + 1}}}, "ports[1].host_port: " + strconv.Itoa(busy+1) + "/tcp is published by task OWNER on this instance"},
		{Request{TaskUID: "T", HolderPID: 1 << 30}, "network namespace: bind-mount /proc/1073741824/ns/net"},
	} {
		var err error
		h.do(func() error { _, err = n.Setup(context.Background(), tc.req); return nil })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Setup(%+v): %v, want %q", tc.req, err, tc.want)
		}
	}
	held, err := n.held()
	if err != nil || len(held) != 1 || held[0] != "OWNER" {
		t.Fatalf("held after refusals: %v %v, want only OWNER's", held, err)
	}
	// The refused task's chosen port went back: OWNER's teardown frees
	// everything.
	h.teardown(n, a)
	if held, _ := n.held(); len(held) != 0 {
		t.Fatalf("held %v", held)
	}
	n.mu.Lock()
	left := len(n.hostPorts)
	n.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d host ports still reserved", left)
	}
}

// A restarted agent adopts the namespaces of its tasks and sweeps away
// those of tasks that are gone, including one whose setup was cut short
// (no cached result).
func TestAdoptAndSweep(t *testing.T) {
	h := newTestHost(t)
	first := h.network()
	kept := h.setup(first, Request{TaskUID: "KEPT", Ports: []Port{{ContainerPort: 80}}})
	gone := h.setup(first, Request{TaskUID: "GONE", Ports: []Port{{ContainerPort: 80}}})
	cut := h.setup(first, Request{TaskUID: "CUT", Ports: []Port{{ContainerPort: 80}}})
	// CUT's ADD "never finished": libcni wrote no result.
	if err := os.Remove(filepath.Join(first.Config().cacheDir(), "results", NetworkName+"-CUT-"+IfName)); err != nil {
		t.Fatal(err)
	}

	first.Close()
	again := h.network() // the agent restarted
	if err := again.Adopt(kept); err != nil {
		t.Fatal(err)
	}
	var swept []string
	h.do(func() (err error) {
		swept, err = again.Sweep(context.Background(), map[string]bool{"KEPT": true})
		return err
	})
	if strings.Join(swept, ",") != "CUT,GONE" {
		t.Fatalf("swept %v, want CUT and GONE", swept)
	}
	if err := again.Adopt(gone); !errors.Is(err, ErrGone) {
		t.Fatalf("adopting a swept task: %v, want ErrGone", err)
	}
	// The kept task still works, its port still published.
	listenIn(t, kept.Path, ":80")
	if who, err := callFrom(t, h.path, "127.0.0.1:"+strconv.Itoa(kept.Ports[0].HostPort)); err != nil || who == "" {
		t.Fatalf("kept task's port: %q %v", who, err)
	}
	for _, a := range []Attachment{gone, cut} {
		if out := h.run("iptables-save"); strings.Contains(out, a.Address.Addr().String()+"/") || strings.Contains(out, ":"+strconv.Itoa(a.Ports[0].HostPort)) {
			t.Fatalf("rules of swept task %s remain:\n%s", a.TaskUID, out)
		}
	}
	// A second address request may not take the adopted one's port.
	var err error
	h.do(func() error {
		_, err = again.Setup(context.Background(), Request{TaskUID: "NEW", Ports: []Port{{ContainerPort: 1, HostPort: kept.Ports[0].HostPort}}})
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "published by task KEPT") {
		t.Fatalf("reusing an adopted task's port: %v", err)
	}
	h.teardown(again, kept)
	if held, _ := again.held(); len(held) != 0 {
		t.Fatalf("held %v after the last teardown", held)
	}
	if left := taskRules(h.run("iptables-save")); len(left) > 0 {
		t.Fatalf("rules of tasks remain:\n%s", strings.Join(left, "\n"))
	}
}

// The namespace of a holder process (the docker driver's container)
// becomes the task's, and stays after the process ends.
func TestSetupWithAHolder(t *testing.T) {
	h := newTestHost(t)
	n := h.network()
	made := filepath.Join(h.dir, "made")
	if err := netns.Create(made); err != nil {
		t.Fatal(err)
	}
	defer netns.Remove(made)
	var pid int
	var wait func() error
	if err := netns.Do(made, func() error {
		cmd := exec_("sleep", "600")
		if err := cmd.Start(); err != nil {
			return err
		}
		pid, wait = cmd.Process.Pid, cmd.Wait
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = wait() })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	att := h.setup(n, Request{TaskUID: "HELD", HolderPID: pid})
	own, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
	var st1, st2 os.FileInfo
	st1, _ = os.Stat(att.Path)
	st2, _ = os.Stat(made)
	if !os.SameFile(st1, st2) {
		t.Fatalf("the task's namespace is not the holder's (%s)", own)
	}
	listenIn(t, made, ":80")
	if who, err := callFrom(t, h.path, net.JoinHostPort(att.Address.Addr().String(), "80")); err != nil || who == "" {
		t.Fatalf("the holder's namespace has the task's address: %q %v", who, err)
	}
	h.teardown(n, att)
}

// taskRules are the iptables lines that belong to one task rather than
// to the network: its masquerade chain (CNI-<hash>) and its jump, its
// port chain (CNI-DN-<hash>) and its jumps, the firewall's rules for its
// address.
func taskRules(save string) []string {
	var out []string
	for line := range strings.SplitSeq(save, "\n") {
		if perTask.MatchString(line) {
			out = append(out, line)
		}
	}
	return out
}

var perTask = regexp.MustCompile(`CNI-[0-9a-f]{16,}|CNI-DN-|id: "|/32 `)

// ruleCount counts the chains and rules of iptables-save output.
func ruleCount(save string) int {
	n := 0
	for line := range strings.SplitSeq(save, "\n") {
		if strings.HasPrefix(line, "-A ") || strings.HasPrefix(line, ":") {
			n++
		}
	}
	return n
}
