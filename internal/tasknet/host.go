package tasknet

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// What the agent checks of its host: the networks it has (CheckSubnet)
// and whether the plugins and privileges bridge mode needs are there
// (Probe).

// HostNetworks lists the host's IPv4 addresses and routes: those of the
// calling thread's network namespace (the agent's, unless called in
// netns.Do).
func HostNetworks() ([]HostNet, error) {
	var out []HostNet
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list the host's interfaces: %w", err)
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue // gone meanwhile
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			ip = ip.Unmap()
			if ip.Is4() && ones > 32 {
				ones -= 96
			}
			out = append(out, HostNet{Prefix: netip.PrefixFrom(ip, ones), Interface: ifc.Name})
		}
	}
	f, err := os.Open("/proc/thread-self/net/route")
	if err != nil {
		return out, fmt.Errorf("read the host's routes: %w", err)
	}
	defer f.Close()
	routes, err := parseRoutes(f)
	if err != nil {
		return out, fmt.Errorf("read the host's routes: %w", err)
	}
	return append(out, routes...), nil
}

// parseRoutes reads /proc/net/route: a header line, then one line per
// IPv4 route, its destination and mask in hex, in the host's byte order.
func parseRoutes(r io.Reader) ([]HostNet, error) {
	sc := bufio.NewScanner(r)
	var out []HostNet
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		dst, err1 := hexAddr(f[1])
		mask, err2 := hexAddr(f[7])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("line %q: %w", sc.Text(), errors.Join(err1, err2))
		}
		m := mask.As4()
		ones, _ := net.IPMask(m[:]).Size()
		out = append(out, HostNet{Prefix: netip.PrefixFrom(dst, ones), Interface: f[0], Route: true})
	}
	return out, sc.Err()
}

// hexAddr decodes an address of /proc/net/route: 8 hex digits, the four
// bytes as they are in memory, which is little-endian on every Linux host
// Trellis runs on (amd64, arm64).
func hexAddr(s string) (netip.Addr, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return netip.Addr{}, fmt.Errorf("%q is not an address", s)
	}
	v := binary.LittleEndian.Uint32(b)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
}

// InstallHint is how to get the plugins on Debian and Ubuntu.
const InstallHint = "apt-get install containernetworking-plugins"

// Probe says whether this host can run bridge tasks with c: every plugin
// in one of c.PluginDirs, the iptables tools the plugins call, and the
// privileges to make namespaces and change the host's network
// (CAP_SYS_ADMIN and CAP_NET_ADMIN: root). nil means it can; the error
// says what is missing and how to get it.
func Probe(c Config) error {
	var missing []string
	for _, p := range Plugins {
		if _, err := findPlugin(c.PluginDirs, p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the CNI plugins %s are not in %s: install them (%s) or give their directory with -cni-plugin-dir",
			strings.Join(missing, ", "), strings.Join(c.PluginDirs, ":"), InstallHint)
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return errors.New("iptables is not in PATH, and the CNI plugins need it for NAT and published ports: install it (apt-get install iptables)")
	}
	if err := checkCapabilities(); err != nil {
		return err
	}
	return nil
}

func findPlugin(dirs []string, name string) (string, error) {
	for _, d := range dirs {
		p := d + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}

// checkCapabilities checks the effective capabilities of the agent:
// CAP_SYS_ADMIN (unshare and mount a namespace) and CAP_NET_ADMIN (veths,
// addresses, iptables).
func checkCapabilities() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("read this process's capabilities: %w", err)
	}
	eff, err := effectiveCaps(string(b))
	if err != nil {
		return err
	}
	var lack []string
	if eff&(1<<unix.CAP_SYS_ADMIN) == 0 {
		lack = append(lack, "CAP_SYS_ADMIN")
	}
	if eff&(1<<unix.CAP_NET_ADMIN) == 0 {
		lack = append(lack, "CAP_NET_ADMIN")
	}
	if len(lack) > 0 {
		return fmt.Errorf("the agent lacks %s: run it as root to give tasks network namespaces", strings.Join(lack, " and "))
	}
	return nil
}

// effectiveCaps reads CapEff from /proc/self/status text.
func effectiveCaps(status string) (uint64, error) {
	for line := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("CapEff %q: %w", strings.TrimSpace(v), err)
			}
			return n, nil
		}
	}
	return 0, errors.New("this process's status has no CapEff line")
}
