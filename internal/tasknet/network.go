package tasknet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"trellis.dev/trellis/internal/atomicfile"
	"trellis.dev/trellis/internal/netns"
)

// Attachment is a task's network as set up: what the agent records with
// the task, reports in its status and shows in its metadata.
type Attachment struct {
	// TaskUID is the CNI container id.
	TaskUID string `json:"task_uid"`
	// Path is the namespace's mount point (Config.NetnsPath).
	Path string `json:"path"`
	// Address is the task's address on the bridge, with the subnet's
	// length; Gateway the bridge's.
	Address netip.Prefix `json:"address"`
	Gateway netip.Addr   `json:"gateway"`
	// Ports are the published ports, each host port as chosen.
	Ports []Port `json:"ports,omitempty"`
	// Transparent is the Request's: recorded with the
	// attachment, so that an agent adopting it writes the same rules.
	Transparent bool `json:"transparent,omitempty"`
}

// Request is what a task asks of its network.
type Request struct {
	TaskUID string
	Ports   []Port
	// HolderPID, when set, is a process whose network namespace becomes
	// the task's (the docker driver's holder container); otherwise the
	// namespace is made anew.
	HolderPID int
	// Transparent: a mesh task with mesh.transparent, whose outbound TCP
	// the agent redirects to its proxy (tasknet itself does nothing with it).
	Transparent bool
}

// Network sets up and tears down the namespaces of an agent's bridge
// tasks through the CNI plugins. It is safe for concurrent use.
type Network struct {
	cfg  Config
	log  *slog.Logger
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
	lo   *libcni.PluginConfig

	mu sync.Mutex
	// hostPorts are the host ports of the attachments this Network knows
	// (set up or adopted), so that two tasks are never given one; each is
	// held by a socket of the agent's while the task publishes it.
	hostPorts map[hostPort]heldPort
	// listen binds a host port (0: any free one) and returns the socket
	// holding it.
	listen func(proto string, port int) (io.Closer, int, error)
}

// heldPort is a published host port: the task publishing it, and the
// agent's socket bound to it, so that nothing else on the host (another
// agent of `trellis dev`, a host process) binds or picks it meanwhile.
// The socket never sees a connection: the portmap plugin's DNAT sends
// every IPv4 connection to the port on to the task first.
type heldPort struct {
	uid  string
	sock io.Closer
}

type hostPort struct {
	port  int
	proto string
}

// New checks c, writes the conflist under c.DataDir and prepares the
// CNI runtime. It checks neither the plugins nor the host's networks:
// Probe and CheckSubnet do.
func New(c Config, log *slog.Logger) (*Network, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b, err := Conflist(c)
	if err != nil {
		return nil, err
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("the task network's conflist does not parse: %w", err)
	}
	lo, err := libcni.NetworkPluginConfFromBytes(LoopbackConf())
	if err != nil {
		return nil, fmt.Errorf("the loopback configuration does not parse: %w", err)
	}
	for _, d := range []string{c.netnsDir(), c.ipamDir(), c.cacheDir()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("-data-dir: %w", err)
		}
	}
	if err := atomicfile.Write(c.conflistPath(), append(b, '\n')); err != nil {
		return nil, fmt.Errorf("-data-dir: write the conflist: %w", err)
	}
	return &Network{
		cfg:       c,
		log:       log,
		cni:       libcni.NewCNIConfigWithCacheDir(c.PluginDirs, c.cacheDir(), nil),
		list:      list,
		lo:        lo,
		hostPorts: make(map[hostPort]heldPort),
		listen:    listenPort,
	}, nil
}

// Config is the network's configuration.
func (n *Network) Config() Config { return n.cfg }

// ConflistPath is the file holding the conflist New wrote.
func (n *Network) ConflistPath() string { return n.cfg.conflistPath() }

// Setup gives a task its namespace: made (or taken from HolderPID),
// mounted at NetnsPath(uid), its loopback up, a veth on the bridge with
// an address, the default route and outbound NAT, and its ports
// published (each host port 0 replaced by a free one). On failure
// nothing of it is left. A leftover of an interrupted Setup for the same
// uid is torn down first.
func (n *Network) Setup(ctx context.Context, req Request) (Attachment, error) {
	if err := checkUID(req.TaskUID); err != nil {
		return Attachment{}, err
	}
	if err := CheckPorts(req.Ports); err != nil {
		return Attachment{}, err
	}
	path := n.cfg.NetnsPath(req.TaskUID)
	if _, err := os.Lstat(path); err == nil {
		n.log.Warn("tearing down what an interrupted setup left of a task's network", "task_uid", req.TaskUID)
		if err := n.teardown(ctx, req.TaskUID, nil); err != nil {
			return Attachment{}, err
		}
	}
	ports, err := n.reservePorts(req.TaskUID, req.Ports)
	if err != nil {
		return Attachment{}, err
	}
	att, err := n.setup(ctx, req, path, ports)
	if err != nil {
		n.releasePorts(req.TaskUID)
		return Attachment{}, err
	}
	return att, nil
}

func (n *Network) setup(ctx context.Context, req Request, path string, ports []Port) (Attachment, error) {
	var err error
	if req.HolderPID > 0 {
		err = netns.Bind(req.HolderPID, path)
	} else {
		err = netns.Create(path)
	}
	if err != nil {
		return Attachment{}, fmt.Errorf("network namespace: %w", err)
	}
	rt, err := n.runtimeConf(req.TaskUID, path, ports)
	if err != nil {
		_ = netns.Remove(path)
		return Attachment{}, err
	}
	lo := &libcni.RuntimeConf{ContainerID: req.TaskUID, NetNS: path, IfName: "lo"}
	if _, err := n.cni.AddNetwork(ctx, n.lo, lo); err != nil {
		_ = netns.Remove(path)
		return Attachment{}, fmt.Errorf("bring up the namespace's loopback: %w", err)
	}
	res, err := n.cni.AddNetworkList(ctx, n.list, rt)
	if err != nil {
		// ADD failed half way: DEL undoes what the plugins did (each DEL
		// is idempotent), and takes back the address.
		derr := n.del(context.WithoutCancel(ctx), rt)
		_ = netns.Remove(path)
		if derr != nil {
			n.log.Warn("cannot undo a failed network setup", "task_uid", req.TaskUID, "err", derr)
		}
		return Attachment{}, fmt.Errorf("add the task to the %s network: %w", NetworkName, err)
	}
	att := Attachment{TaskUID: req.TaskUID, Path: path, Ports: ports, Transparent: req.Transparent}
	if err := readResult(res, path, &att); err != nil {
		_ = n.del(context.WithoutCancel(ctx), rt)
		_ = netns.Remove(path)
		return Attachment{}, err
	}
	n.log.Debug("task network set up", "task_uid", req.TaskUID, "address", att.Address, "ports", att.Ports)
	return att, nil
}

// readResult takes the task's address and gateway from the plugins'
// result: the IPv4 address of the interface in the namespace.
func readResult(res types.Result, path string, att *Attachment) error {
	cur, err := types100.GetResult(res)
	if err != nil {
		return fmt.Errorf("the CNI plugins' result: %w", err)
	}
	for _, ipc := range cur.IPs {
		if ipc.Interface == nil || *ipc.Interface < 0 || *ipc.Interface >= len(cur.Interfaces) {
			continue
		}
		ifc := cur.Interfaces[*ipc.Interface]
		if ifc.Sandbox != path || ifc.Name != IfName {
			continue
		}
		addr, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok || !addr.Unmap().Is4() {
			continue
		}
		ones, _ := ipc.Address.Mask.Size()
		if ones > 32 {
			ones -= 96
		}
		att.Address = netip.PrefixFrom(addr.Unmap(), ones)
		if gw, ok := netip.AddrFromSlice(ipc.Gateway); ok {
			att.Gateway = gw.Unmap()
		}
		return nil
	}
	return fmt.Errorf("the CNI plugins' result has no IPv4 address on %s in %s", IfName, path)
}

// runtimeConf is the CNI runtime configuration of a task's ADD and DEL.
func (n *Network) runtimeConf(uid, path string, ports []Port) (*libcni.RuntimeConf, error) {
	caps, err := capabilityArgs(ports)
	if err != nil {
		return nil, err
	}
	return &libcni.RuntimeConf{ContainerID: uid, NetNS: path, IfName: IfName, CapabilityArgs: caps}, nil
}

// del runs the conflist's DEL for rt.
func (n *Network) del(ctx context.Context, rt *libcni.RuntimeConf) error {
	if err := n.cni.DelNetworkList(ctx, n.list, rt); err != nil {
		return err
	}
	return nil
}

// Teardown undoes Setup: the plugins' DEL (the veth, the address's
// lease, the NAT and port rules), then the namespace's mount. It is
// idempotent, and works from what the agent recorded (att) even after a
// restart, or with a namespace that is already gone.
func (n *Network) Teardown(ctx context.Context, att Attachment) error {
	if err := checkUID(att.TaskUID); err != nil {
		return err
	}
	return n.teardown(ctx, att.TaskUID, att.Ports)
}

// teardown DELs uid's attachment and removes its namespace. ports are the
// recorded ones; nil takes them from the CNI cache, when it has them.
func (n *Network) teardown(ctx context.Context, uid string, ports []Port) error {
	path := n.cfg.NetnsPath(uid)
	nsPath := path
	if !netns.Is(path) {
		// After a reboot the mount point is an empty file: the plugins
		// must not try to enter it, but still release the lease.
		nsPath = ""
	}
	rt, err := n.runtimeConf(uid, nsPath, ports)
	if err != nil {
		return err
	}
	_, cached, cerr := n.cni.GetNetworkListCachedConfig(n.list, rt)
	switch {
	case cerr == nil && cached != nil:
		// The ADD finished: libcni gives every plugin its result back.
		if ports == nil {
			rt.CapabilityArgs = cached.CapabilityArgs
		}
		err = n.del(ctx, rt)
	default:
		// Interrupted in the ADD, or the cache is gone: see del.go.
		if ports == nil {
			// The portmap plugin's DEL removes the task's whole chain
			// and its jumps, whatever the mappings, but does nothing at
			// all without one: give it one when the ports are unknown.
			rt.CapabilityArgs, _ = capabilityArgs([]Port{{ContainerPort: 1, HostPort: 1}})
		}
		err = n.delUncached(ctx, rt)
	}
	if err == nil && nsPath != "" {
		lo := &libcni.RuntimeConf{ContainerID: uid, NetNS: nsPath, IfName: "lo"}
		if lerr := n.cni.DelNetwork(ctx, n.lo, lo); lerr != nil {
			err = lerr
		}
	}
	if err != nil {
		return fmt.Errorf("remove the task from the %s network: %w", NetworkName, err)
	}
	if err := netns.Remove(path); err != nil {
		return err
	}
	n.releasePorts(uid)
	n.log.Debug("task network torn down", "task_uid", uid)
	return nil
}

// Adopt takes on an attachment a previous run of the agent set up: its
// host ports are taken again. It fails when the namespace is no longer
// mounted (the host rebooted, or someone unmounted it): the task's
// network must then be set up anew.
func (n *Network) Adopt(att Attachment) error {
	if err := checkUID(att.TaskUID); err != nil {
		return err
	}
	if att.Path != n.cfg.NetnsPath(att.TaskUID) {
		return fmt.Errorf("network namespace %s is not where this agent keeps task %s's (%s)", att.Path, att.TaskUID, n.cfg.NetnsPath(att.TaskUID))
	}
	if !netns.Is(att.Path) {
		return fmt.Errorf("network namespace %s: %w", att.Path, ErrGone)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range att.Ports {
		k := hostPort{p.HostPort, p.proto()}
		if old, ok := n.hostPorts[k]; ok && old.uid == att.TaskUID {
			continue
		}
		// Held again; a host process that took the port meanwhile keeps
		// it (the task's DNAT still comes first).
		sock, _, err := n.listen(p.proto(), p.HostPort)
		if err != nil {
			n.log.Warn("cannot hold an adopted task's host port; something else has it", "task_uid", att.TaskUID, "port", k.String(), "err", err)
			sock = nil
		}
		n.hostPorts[k] = heldPort{uid: att.TaskUID, sock: sock}
	}
	return nil
}

// ErrGone is wrapped by Adopt's refusal of an attachment whose namespace
// no longer exists.
var ErrGone = errors.New("the namespace is gone")

// Sweep tears down every attachment of this agent's network whose task
// is not in keep: namespaces mounted, leases held and results cached by
// tasks that ended while the agent was away, or by setups it never
// finished. It returns the uids it tore down, and the errors of those it
// could not.
func (n *Network) Sweep(ctx context.Context, keep map[string]bool) ([]string, error) {
	held, err := n.held()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	var swept []string
	for _, uid := range held {
		if keep[uid] {
			continue
		}
		if err := n.teardown(ctx, uid, nil); err != nil {
			errs = append(errs, fmt.Errorf("task %s: %w", uid, err))
			continue
		}
		swept = append(swept, uid)
	}
	return swept, errors.Join(errs...)
}

// held lists the task uids this agent's network holds anything for.
func (n *Network) held() ([]string, error) {
	uids := map[string]bool{}
	var errs []error
	// Mount points.
	if ents, err := os.ReadDir(n.cfg.netnsDir()); err == nil {
		for _, e := range ents {
			uids[e.Name()] = true
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	// Leases: host-local keeps one file per address, named by it, holding
	// the container id and the interface.
	if ents, err := os.ReadDir(n.cfg.leaseDir()); err == nil {
		for _, e := range ents {
			if _, err := netip.ParseAddr(e.Name()); err != nil {
				continue // last_reserved_ip.0, lock
			}
			b, err := os.ReadFile(filepath.Join(n.cfg.leaseDir(), e.Name()))
			if err != nil {
				continue
			}
			id, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
			if id = strings.TrimSpace(id); id != "" {
				uids[id] = true
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	// Cached results: <cache>/results/<network>-<container id>-<ifname>.
	if ents, err := os.ReadDir(filepath.Join(n.cfg.cacheDir(), "results")); err == nil {
		for _, e := range ents {
			rest, ok := strings.CutPrefix(e.Name(), NetworkName+"-")
			if !ok {
				continue
			}
			if id, ok := strings.CutSuffix(rest, "-"+IfName); ok {
				uids[id] = true
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	out := make([]string, 0, len(uids))
	for uid := range uids {
		if checkUID(uid) == nil {
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	return out, errors.Join(errs...)
}

// reservePorts gives each port a host port: a fixed one checked free (not
// another task's, not bound on the host), 0 replaced by a free one. They
// are the task's, and held, until releasePorts.
func (n *Network) reservePorts(uid string, ports []Port) ([]Port, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := slices.Clone(ports)
	var taken []hostPort
	undo := func() {
		for _, k := range taken {
			if h := n.hostPorts[k]; h.sock != nil {
				h.sock.Close()
			}
			delete(n.hostPorts, k)
		}
	}
	for i, p := range out {
		out[i].Protocol = p.proto()
		if p.HostPort != 0 {
			k := hostPort{p.HostPort, p.proto()}
			if other, ok := n.hostPorts[k]; ok && other.uid != uid {
				undo()
				return nil, fmt.Errorf("ports[%d].host_port: %s is published by task %s on this instance", i, k, other.uid)
			}
			sock, _, err := n.listen(p.proto(), p.HostPort)
			if err != nil {
				undo()
				return nil, fmt.Errorf("ports[%d].host_port: %s is in use on this host: %v", i, k, err)
			}
			n.hostPorts[k] = heldPort{uid: uid, sock: sock}
			taken = append(taken, k)
			continue
		}
		// The kernel picks a port no socket has, which is also none of
		// the ports held for tasks.
		sock, port, err := n.listen(p.proto(), 0)
		if err != nil {
			undo()
			return nil, fmt.Errorf("ports[%d].host_port: no free %s port: %v", i, p.proto(), err)
		}
		out[i].HostPort = port
		k := hostPort{port, p.proto()}
		n.hostPorts[k] = heldPort{uid: uid, sock: sock}
		taken = append(taken, k)
	}
	return out, nil
}

func (n *Network) releasePorts(uid string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, h := range n.hostPorts {
		if h.uid == uid {
			if h.sock != nil {
				h.sock.Close()
			}
			delete(n.hostPorts, k)
		}
	}
}

// Close lets go of the host ports the Network holds (the agent stops;
// its tasks keep publishing them, and the next agent holds them again
// when it adopts the tasks).
func (n *Network) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, h := range n.hostPorts {
		if h.sock != nil {
			h.sock.Close()
		}
		delete(n.hostPorts, k)
	}
}

func (k hostPort) String() string { return strconv.Itoa(k.port) + "/" + k.proto }

// listenPort binds port (0: any free one) on every IPv4 address of the
// host and returns the socket and the port. IPv4 only: task ports are
// published for IPv4, and an IPv6 connection must be refused, not land
// on a socket that never accepts.
func listenPort(proto string, port int) (io.Closer, int, error) {
	addr := "0.0.0.0:" + strconv.Itoa(port)
	if proto == UDP {
		c, err := net.ListenPacket("udp4", addr)
		if err != nil {
			return nil, 0, err
		}
		return c, c.LocalAddr().(*net.UDPAddr).Port, nil
	}
	l, err := net.Listen("tcp4", addr)
	if err != nil {
		return nil, 0, err
	}
	return l, l.Addr().(*net.TCPAddr).Port, nil
}
