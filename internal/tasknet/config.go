package tasknet

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
)

// The defaults of an agent's task network.
const (
	// DefaultBridge is the host bridge the tasks' veths are enslaved to.
	DefaultBridge = "trellis0"
	// DefaultSubnet is the bridge's IPv4 subnet: 4,094 addresses, in a
	// corner of 172.16.0.0/12 that Docker (172.17.0.0/16 and up, in /16
	// steps) reaches only after fifty networks.
	DefaultSubnet = "172.26.64.0/20"
	// DefaultPluginDir is where Debian's containernetworking-plugins puts
	// the plugins.
	DefaultPluginDir = "/usr/lib/cni"
	// NetworkName names the CNI network: its chains, its lease directory,
	// its cached results.
	NetworkName = "trellis"
	// IfName is the task's interface inside its namespace.
	IfName = "eth0"
)

// Config is an agent's task network. Each field names the flag that sets
// it, and Validate's errors name that flag.
type Config struct {
	// Bridge (-bridge-name) is the host bridge; the CNI bridge plugin
	// creates it when missing.
	Bridge string
	// Subnet (-bridge-subnet) is the bridge's IPv4 subnet; the bridge has
	// its first address and is the tasks' gateway.
	Subnet netip.Prefix
	// RangeStart and RangeEnd, when set, are the part of Subnet this
	// agent's tasks take their addresses from: agents that share a host
	// and a bridge (`trellis dev -instances N`) each get their own part,
	// since each keeps its own leases. Zero: the whole subnet.
	RangeStart, RangeEnd netip.Addr
	// PluginDirs (-cni-plugin-dir) are searched for the plugins, in order.
	PluginDirs []string
	// DataDir is where the agent keeps the network's state: the conflist
	// it writes, the namespaces' mount points, the IPAM leases and the
	// CNI results cache. An absolute path, the agent's own.
	DataDir string
}

// DefaultConfig is the default network, its state under dataDir.
func DefaultConfig(dataDir string) Config {
	return Config{
		Bridge:     DefaultBridge,
		Subnet:     netip.MustParsePrefix(DefaultSubnet),
		PluginDirs: []string{DefaultPluginDir},
		DataDir:    dataDir,
	}
}

// bridgeName is what Linux takes as an interface name (IFNAMSIZ less the
// NUL; no '/', ':' or white space) and iptables takes in a rule.
var bridgeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$`)

// Validate checks the values alone; CheckSubnet compares the subnet with
// the host's networks.
func (c Config) Validate() error {
	if !bridgeName.MatchString(c.Bridge) {
		return fmt.Errorf("-bridge-name: %q is not an interface name (1 to 15 letters, digits, '_', '.' or '-', not starting with a symbol)", c.Bridge)
	}
	if err := checkSubnetValue(c.Subnet); err != nil {
		return err
	}
	if c.RangeStart.IsValid() != c.RangeEnd.IsValid() {
		return fmt.Errorf("-bridge-subnet: a range needs both its start and its end")
	}
	if c.RangeStart.IsValid() {
		gw := c.Subnet.Addr().Next()
		switch {
		case !c.Subnet.Contains(c.RangeStart) || !c.Subnet.Contains(c.RangeEnd):
			return fmt.Errorf("-bridge-subnet: the range %s-%s is not inside %s", c.RangeStart, c.RangeEnd, c.Subnet)
		case c.RangeEnd.Less(c.RangeStart):
			return fmt.Errorf("-bridge-subnet: the range %s-%s ends before it starts", c.RangeStart, c.RangeEnd)
		case !gw.Less(c.RangeStart):
			return fmt.Errorf("-bridge-subnet: the range %s-%s holds the bridge's address %s", c.RangeStart, c.RangeEnd, gw)
		}
	}
	if len(c.PluginDirs) == 0 {
		return fmt.Errorf("-cni-plugin-dir: none given (Debian's plugins are in %s)", DefaultPluginDir)
	}
	for _, d := range c.PluginDirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("-cni-plugin-dir: %q is not an absolute path", d)
		}
	}
	if !filepath.IsAbs(c.DataDir) {
		return fmt.Errorf("-data-dir: %q is not an absolute path", c.DataDir)
	}
	return nil
}

// checkSubnetValue refuses a subnet that cannot hold tasks: not IPv4, not
// a network address, too small, or in a range that is never a LAN's.
func checkSubnetValue(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return fmt.Errorf("-bridge-subnet: none given (a private IPv4 CIDR such as %s)", DefaultSubnet)
	case !p.Addr().Is4():
		return fmt.Errorf("-bridge-subnet: %s is not IPv4 (task networks are IPv4 for now)", p)
	case p.Masked() != p:
		return fmt.Errorf("-bridge-subnet: %s is not a network address: did you mean %s?", p, p.Masked())
	case p.Bits() > 29:
		return fmt.Errorf("-bridge-subnet: %s is too small: a /29 or larger leaves room for the bridge and tasks", p)
	case p.Bits() < 8:
		return fmt.Errorf("-bridge-subnet: %s is too large: use a /8 or smaller", p)
	case p.Addr().IsLoopback(), p.Addr().IsMulticast(), p.Addr().IsLinkLocalUnicast(), p.Addr().IsUnspecified(),
		p.Overlaps(netip.MustParsePrefix("240.0.0.0/4")):
		return fmt.Errorf("-bridge-subnet: %s is in a reserved range (loopback, link-local, multicast or class E): use a private range such as %s", p, DefaultSubnet)
	}
	return nil
}

// Paths of the state under Config.DataDir.
func (c Config) conflistPath() string { return filepath.Join(c.DataDir, NetworkName+".conflist") }
func (c Config) netnsDir() string     { return filepath.Join(c.DataDir, "netns") }
func (c Config) ipamDir() string      { return filepath.Join(c.DataDir, "ipam") }
func (c Config) leaseDir() string     { return filepath.Join(c.ipamDir(), NetworkName) }
func (c Config) cacheDir() string     { return filepath.Join(c.DataDir, "cache") }

// NetnsPath is where the namespace of the task with uid is mounted.
func (c Config) NetnsPath(uid string) string { return filepath.Join(c.netnsDir(), uid) }

// SplitRange divides the host addresses of subnet, after the bridge's,
// into n parts and returns the i-th (from 0): what `trellis dev
// -instances n` gives each of its agents on the one bridge.
func SplitRange(subnet netip.Prefix, i, n int) (start, end netip.Addr, err error) {
	if err := checkSubnetValue(subnet); err != nil {
		return netip.Addr{}, netip.Addr{}, err
	}
	if n < 1 || i < 0 || i >= n {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("part %d of %d does not exist", i, n)
	}
	base := addrUint(subnet.Addr())
	size := uint32(1) << (32 - subnet.Bits())
	// .0 is the network, .1 the bridge, the last the broadcast.
	first, last := base+2, base+size-2
	hosts := last - first + 1
	per := hosts / uint32(n)
	if per < 1 {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("-bridge-subnet: %s has %d addresses for tasks, too few for %d agents", subnet, hosts, n)
	}
	s := first + uint32(i)*per
	e := s + per - 1
	if i == n-1 {
		e = last
	}
	return uintAddr(s), uintAddr(e), nil
}

func addrUint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func uintAddr(u uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
}
