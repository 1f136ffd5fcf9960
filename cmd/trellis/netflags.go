package main

import (
	"fmt"
	"net/netip"

	"github.com/spf13/pflag"

	"trellis.dev/trellis/internal/agent"
	"trellis.dev/trellis/internal/tasknet"
)

// networkFlags are the bridge task networking flags of `trellis agent`
// and `trellis dev`.
type networkFlags struct {
	bridge     string
	subnet     string
	pluginDirs []string
}

func (f *networkFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.bridge, "bridge-name", tasknet.DefaultBridge, "the host bridge of tasks with network: bridge (created when missing)")
	fs.StringVar(&f.subnet, "bridge-subnet", tasknet.DefaultSubnet, "the IPv4 subnet of the bridge: each bridge task gets an address in it; it must not overlap the host's networks")
	fs.StringArrayVar(&f.pluginDirs, "cni-plugin-dir", []string{tasknet.DefaultPluginDir}, "where the CNI plugins are (bridge, host-local, firewall, portmap, loopback: apt-get install containernetworking-plugins); repeatable")
}

// config is the agent's network configuration, refused naming the flag.
func (f *networkFlags) config() (*agent.NetworkConfig, error) {
	subnet, err := netip.ParsePrefix(f.subnet)
	if err != nil {
		return nil, fmt.Errorf("-bridge-subnet: %q is not a CIDR (like %s)", f.subnet, tasknet.DefaultSubnet)
	}
	c := &agent.NetworkConfig{Bridge: f.bridge, Subnet: subnet, PluginDirs: f.pluginDirs}
	tc := tasknet.DefaultConfig("/")
	tc.Bridge, tc.Subnet, tc.PluginDirs = c.Bridge, c.Subnet, c.PluginDirs
	if err := tc.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}
