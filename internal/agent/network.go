package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"trellis.dev/trellis/internal/netns"
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

// taskNetwork is the agent's task network, as the task manager uses it
// (tasks.Networks): tasknet's, plus, in each bridge task's namespace, a
// listener of the local API's metadata endpoint on the address the task
// has in TRELLIS_TASK_METADATA_URI (127.0.0.1:<port>), which in the
// task's namespace is the task's own loopback.
type taskNetwork struct {
	net *tasknet.Network
	// unavailable is why bridge tasks cannot run here; nil when they can.
	unavailable error
	log         *slog.Logger
	// metadata serves the metadata endpoint; addr is the local API's
	// address, whose port the listeners in the namespaces take.
	metadata http.Handler
	addr     string

	mu        sync.Mutex
	listeners map[string]*http.Server // by task uid
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
	n := &taskNetwork{log: log, listeners: map[string]*http.Server{}}
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
	}
	return err
}

func (n *taskNetwork) Teardown(ctx context.Context, att tasknet.Attachment) error {
	n.stopMetadata(att.TaskUID)
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
	all := n.listeners
	n.listeners = map[string]*http.Server{}
	n.mu.Unlock()
	for _, srv := range all {
		_ = srv.Close()
	}
}
