package tasknet

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// A DEL without the cached result.
//
// libcni hands each plugin's DEL the result of the ADD (prevResult) from
// its cache, which it writes once the whole ADD has succeeded. An agent
// killed in the middle of an ADD leaves plugins' work done and no cached
// result; so would a cache someone removed. Without prevResult the
// firewall plugin does not know which address's rules to delete, and the
// portmap plugin, without the port mappings, deletes nothing. The agent
// knows both: the address from the lease host-local wrote for the task,
// the ports from its own record. delUncached gives them to the plugins as
// libcni would have.

// leasedAddr is the address host-local leased to uid, if any.
func (n *Network) leasedAddr(uid string) (netip.Addr, bool) {
	ents, err := os.ReadDir(n.cfg.leaseDir())
	if err != nil {
		return netip.Addr{}, false
	}
	for _, e := range ents {
		a, err := netip.ParseAddr(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(n.cfg.leaseDir(), e.Name()))
		if err != nil {
			continue
		}
		id, _, _ := strings.Cut(string(b), "\n")
		if strings.TrimSpace(id) == uid {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// delUncached runs the conflist's DEL, last plugin first, with a
// prevResult made from the task's leased address (when it has one).
func (n *Network) delUncached(ctx context.Context, rt *libcni.RuntimeConf) error {
	var prev map[string]any
	if addr, ok := n.leasedAddr(rt.ContainerID); ok {
		r := &types100.Result{
			CNIVersion: CNIVersion,
			Interfaces: []*types100.Interface{{Name: rt.IfName, Sandbox: rt.NetNS}},
			IPs: []*types100.IPConfig{{
				Interface: types100.Int(0),
				Address:   net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(n.cfg.Subnet.Bits(), 32)},
				Gateway:   n.cfg.Subnet.Addr().Next().AsSlice(),
			}},
		}
		if err := roundTrip(r, &prev); err != nil {
			return err
		}
	}
	for i := len(n.list.Plugins) - 1; i >= 0; i-- {
		p := n.list.Plugins[i]
		inject := map[string]any{"name": n.list.Name, "cniVersion": n.list.CNIVersion}
		if prev != nil {
			inject["prevResult"] = prev
		}
		rc := map[string]any{}
		for capability, on := range p.Network.Capabilities {
			if v, ok := rt.CapabilityArgs[capability]; on && ok {
				rc[capability] = v
			}
		}
		if len(rc) > 0 {
			inject["runtimeConfig"] = rc
		}
		conf, err := libcni.InjectConf(p, inject)
		if err != nil {
			return err
		}
		path, err := invoke.FindInPath(p.Network.Type, n.cfg.PluginDirs)
		if err != nil {
			return err
		}
		args := &invoke.Args{Command: "DEL", ContainerID: rt.ContainerID, NetNS: rt.NetNS, IfName: rt.IfName, Path: strings.Join(n.cfg.PluginDirs, string(os.PathListSeparator))}
		if err := invoke.ExecPluginWithoutResult(ctx, path, conf.Bytes, args, nil); err != nil {
			return fmt.Errorf("plugin type=%q failed (delete): %w", p.Network.Type, err)
		}
	}
	return nil
}

// roundTrip turns v into plain JSON values (what InjectConf embeds).
func roundTrip(v any, out *map[string]any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
