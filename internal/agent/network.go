package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"trellis.dev/trellis/internal/netns"
	"trellis.dev/trellis/internal/redirect"
	"trellis.dev/trellis/internal/tasknet"
)

// NetworkConfig is the agent's bridge task networking: the flags
// -bridge-name, -bridge-subnet and -cni-plugin-dir.
type NetworkConfig struct {
	// Bridge is the host bridge (tasknet.DefaultBridge when empty).
	Bridge string
	// Subnet is the bridge's subnet (tasknet.DefaultSubnet when not set).
	Subnet netip.Prefix
	// RangeStart and RangeEnd, when set, are the part of Subnet this
	// agent leases from (agents sharing a host and a bridge: trellis dev).
	RangeStart, RangeEnd netip.Addr
	// PluginDirs are where the CNI plugins are (tasknet.DefaultPluginDir
	// when empty).
	PluginDirs []string
}

// DefaultNetworkConfig is the network of an agent given no flags.
func DefaultNetworkConfig() *NetworkConfig {
	return &NetworkConfig{Bridge: tasknet.DefaultBridge, Subnet: netip.MustParsePrefix(tasknet.DefaultSubnet), PluginDirs: []string{tasknet.DefaultPluginDir}}
}

func (c *NetworkConfig) tasknetConfig(dataDir string) tasknet.Config {
	t := tasknet.DefaultConfig(filepath.Join(dataDir, "network"))
	if c.Bridge != "" {
		t.Bridge = c.Bridge
	}
	if c.Subnet.IsValid() {
		t.Subnet = c.Subnet
	}
	if len(c.PluginDirs) > 0 {
		t.PluginDirs = c.PluginDirs
	}
	t.RangeStart, t.RangeEnd = c.RangeStart, c.RangeEnd
	return t
}

// TaskDNS serves DNS in a bridge task's namespace: the dns component
// (dns.AgentComponent), when the agent has one.
type TaskDNS interface {
	// ServeTaskNamespace listens in the namespace at path, and returns
	// the listener and the address (in the namespace) it listens on.
	ServeTaskNamespace(path string) (io.Closer, netip.AddrPort, error)
}

// taskNetwork is the agent's task network, as the task manager uses it
// (tasks.Networks): tasknet's, plus, in each bridge task's namespace, a
// listener of the local API's metadata endpoint on the address the task
// has in TRELLIS_TASK_METADATA_URI (127.0.0.1:<port>), which in the
// task's namespace is the task's own loopback; and, when the agent serves
// DNS, its DNS on that loopback, where the task's queries to any resolver
// are sent (redirect.ApplyDNS).
type taskNetwork struct {
	net *tasknet.Network
	// unavailable is why bridge tasks cannot run here; nil when they can.
	unavailable error
	log         *slog.Logger
	// metadata serves the metadata endpoint; addr is the local API's
	// address, whose port the listeners in the namespaces take.
	metadata http.Handler
	addr     string

	// dns serves DNS in the namespaces; nil: the agent serves none.
	dns TaskDNS

	mu        sync.Mutex
	listeners map[string]*http.Server // by task uid
	dnsByUID  map[string]io.Closer
}

// newTaskNetwork checks the agent's network configuration against the
// host: the plugins and privileges (tasknet.Probe) and the subnet against
// the host's networks. A host that fails either runs no bridge tasks, and
// says why; a configuration that is wrong in itself is refused.
func newTaskNetwork(c *NetworkConfig, dataDir string, log *slog.Logger) (*taskNetwork, error) {
	tc := c.tasknetConfig(dataDir)
	if err := tc.Validate(); err != nil {
		return nil, configError("network", "%v", err)
	}
	n := &taskNetwork{log: log, listeners: map[string]*http.Server{}, dnsByUID: map[string]io.Closer{}}
	if err := tasknet.Probe(tc); err != nil {
		n.unavailable = err
	} else if host, err := tasknet.HostNetworks(); err != nil {
		n.unavailable = fmt.Errorf("cannot check -bridge-subnet against the host's networks: %w", err)
	} else if err := tasknet.CheckSubnet(tc, host); err != nil {
		n.unavailable = err
	}
	if n.unavailable != nil {
		log.Warn("tasks with network: bridge cannot run on this instance; host networking works", "reason", n.unavailable)
		return n, nil
	}
	tn, err := tasknet.New(tc, log)
	if err != nil {
		return nil, configError("-data-dir", "%v", err)
	}
	n.net = tn
	log.Info("bridge task networking is available", "bridge", tc.Bridge, "subnet", tc.Subnet, "conflist", tn.ConflistPath())
	return n, nil
}

func (n *taskNetwork) Unavailable() error {
	if n.unavailable != nil {
		return n.unavailable
	}
	return nil
}

func (n *taskNetwork) Setup(ctx context.Context, req tasknet.Request) (tasknet.Attachment, error) {
	if n.net == nil {
		return tasknet.Attachment{}, n.unavailable
	}
	att, err := n.net.Setup(ctx, req)
	if err == nil {
		n.serveMetadata(att)
		if err = n.serveDNS(ctx, att); err != nil {
			n.stopMetadata(att.TaskUID)
			n.stopDNS(att.TaskUID)
			if terr := n.net.Teardown(ctx, att); terr != nil {
				err = fmt.Errorf("%w; and the namespace could not be torn down: %v", err, terr)
			}
			return tasknet.Attachment{}, err
		}
	}
	return att, err
}

func (n *taskNetwork) Adopt(att tasknet.Attachment) error {
	if n.net == nil {
		return n.unavailable
	}
	err := n.net.Adopt(att)
	if err == nil {
		n.serveMetadata(att)
		ctx, cancel := context.WithTimeout(context.Background(), dnsRedirectTimeout)
		defer cancel()
		if err := n.serveDNS(ctx, att); err != nil {
			n.log.Warn("the adopted task's outbound traffic is not redirected to its proxy", "task_uid", att.TaskUID, "err", err)
		}
	}
	return err
}

func (n *taskNetwork) Teardown(ctx context.Context, att tasknet.Attachment) error {
	n.stopMetadata(att.TaskUID)
	n.stopDNS(att.TaskUID)
	if n.net == nil {
		return n.unavailable
	}
	return n.net.Teardown(ctx, att)
}

func (n *taskNetwork) Sweep(ctx context.Context, keep map[string]bool) ([]string, error) {
	if n.net == nil {
		return nil, nil
	}
	return n.net.Sweep(ctx, keep)
}

// serveMetadata listens in the task's namespace on the local API's
// address, for the metadata endpoint alone. A task that took that port
// itself keeps it: the agent then logs that the task cannot read its
// metadata.
func (n *taskNetwork) serveMetadata(att tasknet.Attachment) {
	if n.metadata == nil {
		return
	}
	_, port, _ := net.SplitHostPort(n.addr)
	var ln net.Listener
	err := netns.Do(att.Path, func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
		return err
	})
	if err != nil {
		n.log.Warn("the task cannot reach its metadata: cannot listen in its namespace", "task_uid", att.TaskUID, "addr", "127.0.0.1:"+port, "err", err)
		return
	}
	srv := &http.Server{Handler: n.metadata, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)}
	n.mu.Lock()
	old := n.listeners[att.TaskUID]
	n.listeners[att.TaskUID] = srv
	n.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Warn("the metadata endpoint in a task's namespace stopped", "task_uid", att.TaskUID, "err", err)
		}
	}()
}

func (n *taskNetwork) stopMetadata(uid string) {
	n.mu.Lock()
	srv := n.listeners[uid]
	delete(n.listeners, uid)
	n.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// close stops every listener in the tasks' namespaces and lets go of the
// host ports held for them (the agent stops; the tasks run on, and the
// next agent listens and holds again when it adopts them).
func (n *taskNetwork) close() {
	if n.net != nil {
		n.net.Close()
	}
	n.mu.Lock()
	all, dns := n.listeners, n.dnsByUID
	n.listeners, n.dnsByUID = map[string]*http.Server{}, map[string]io.Closer{}
	n.mu.Unlock()
	for _, srv := range all {
		_ = srv.Close()
	}
	for _, l := range dns {
		_ = l.Close()
	}
}

// dnsRedirectTimeout bounds the writing of a namespace's DNS redirect
// when the agent adopts it (one iptables-save and one restore).
const dnsRedirectTimeout = 30 * time.Second

// serveDNS serves the agent's DNS in the task's namespace and sends the
// task's DNS queries, to whatever resolver, there: the task resolves the
// trellis. names through its agent, and every other name through the
// recursors the agent forwards them to. A task whose namespace refuses
// either runs on, resolving as it would without: the agent logs why.
// For a transparent mesh task (att.Transparent) it writes the proxy's
// outbound rules too, with the same DNS option (redirect.ApplyDNS): the
// error it returns is that of those rules, without which the task must
// not run.
func (n *taskNetwork) serveDNS(ctx context.Context, att tasknet.Attachment) error {
	var l io.Closer
	var addr netip.AddrPort
	if n.dns != nil {
		var err error
		if l, addr, err = n.dns.ServeTaskNamespace(att.Path); err != nil {
			n.log.Warn("the task cannot resolve through the agent's DNS: cannot listen in its namespace", "task_uid", att.TaskUID, "err", err)
			l = nil
		}
	}
	if l == nil && !att.Transparent {
		return nil
	}
	err := redirect.InNetns(att.Path, func() error {
		if att.Transparent {
			_, err := redirect.Apply(ctx, transparentRedirect(addr))
			return err
		}
		_, err := redirect.ApplyDNS(ctx, redirect.DNSRedirect{Resolver: "0.0.0.0/0", To: addr.String()})
		return err
	})
	if err != nil {
		if l != nil {
			_ = l.Close()
		}
		if att.Transparent {
			return fmt.Errorf("redirect the mesh task's outbound traffic to its proxy: %w", err)
		}
		n.log.Warn("the task cannot resolve through the agent's DNS: cannot redirect its queries", "task_uid", att.TaskUID, "err", err)
		return nil
	}
	if l == nil {
		return nil
	}
	n.mu.Lock()
	old := n.dnsByUID[att.TaskUID]
	n.dnsByUID[att.TaskUID] = l
	n.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

// transparentRedirect is the redirect of a transparent mesh task's
// namespace: seed 004's defaults (outbound TCP to the proxy's 15001, the
// proxy's UID and GID 1337 and loopback skipped, the metadata address
// excluded), and, when dnsTo is valid, the DNS queries to the agent's DNS
// there, as ApplyDNS writes them (Apply would otherwise remove that
// chain). Inbound traffic is not redirected.
func transparentRedirect(dnsTo netip.AddrPort) redirect.Config {
	c := redirect.DefaultConfig()
	if dnsTo.IsValid() {
		c.DNSResolver, c.DNSRedirectTo = "0.0.0.0/0", dnsTo.String()
	}
	return c
}

func (n *taskNetwork) stopDNS(uid string) {
	n.mu.Lock()
	l := n.dnsByUID[uid]
	delete(n.dnsByUID, uid)
	n.mu.Unlock()
	if l != nil {
		_ = l.Close()
	}
}
