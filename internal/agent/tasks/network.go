package tasks

import (
	"context"
	"errors"
	"fmt"
	"time"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/tasknet"
)

// Task networks: a bridge task (network: bridge) gets its network
// namespace before its first container starts and gives it back after
// its last has exited. The namespace's record is saved with the task, so
// a restarted agent adopts it, and anything of the network that no task
// it knows owns is swept at start (tasknet).

// Networks is what the task manager needs of the agent's task network
// (tasknet.Network, with the agent's own additions around it).
type Networks interface {
	// Unavailable says why bridge tasks cannot run here (no plugins, not
	// root, a subnet clash), nil when they can.
	Unavailable() error
	Setup(ctx context.Context, req tasknet.Request) (tasknet.Attachment, error)
	Teardown(ctx context.Context, att tasknet.Attachment) error
	Adopt(att tasknet.Attachment) error
	Sweep(ctx context.Context, keep map[string]bool) ([]string, error)
}

// taskNetwork is a bridge task's network as recorded with the task.
type taskNetwork struct {
	// Holder is the container that holds the namespace, for a task with
	// containers of a driver that needs one (docker).
	Holder *driver.Handle `json:"holder,omitempty"`
	// Attachment is the namespace as set up; nil while it is being set
	// up (a record saved before, so that an agent killed in the middle
	// finds what to undo).
	Attachment *tasknet.Attachment `json:"attachment,omitempty"`
	// Released: torn down, once the task's containers have all exited.
	Released bool `json:"released,omitempty"`
}

// networkTimeout bounds a setup or teardown (a handful of plugin runs).
const networkTimeout = 2 * time.Minute

// isBridge says whether a definition asks for a task network.
func isBridge(def *pborch.TaskDefinition) bool {
	return def.GetNetwork() == orchestrator.NetworkBridge
}

// requestedPorts are the definition's ports as tasknet takes them.
func requestedPorts(def *pborch.TaskDefinition) []tasknet.Port {
	var out []tasknet.Port
	for _, p := range def.GetPorts() {
		out = append(out, tasknet.Port{Name: p.GetName(), ContainerPort: int(p.GetContainerPort()), HostPort: int(p.GetHostPort()), Protocol: p.GetProtocol()})
	}
	return out
}

// holderDriver is the driver that must hold the task's namespace: one of
// the task's containers runs on a driver that cannot join a namespace by
// its path (driver.NetnsHolder). "" when none does.
func (m *Manager) holderDriver(def *pborch.TaskDefinition) (string, driver.NetnsHolder) {
	for _, c := range def.GetContainers() {
		if h, ok := m.cfg.Drivers[c.GetDriver()].(driver.NetnsHolder); ok {
			return c.GetDriver(), h
		}
	}
	return "", nil
}

// setupNetwork gives a bridge task its namespace (adopting the one a
// previous run of the agent made when it is still there), recording each
// step with the task. It returns the error the task stops with.
func (m *Manager) setupNetwork(e *task) error {
	m.mu.Lock()
	def, uid, key, rec := e.def, e.uid, e.key(), e.net
	m.mu.Unlock()
	if !isBridge(def) {
		return nil
	}
	if m.cfg.Network == nil {
		return errors.New("network: bridge: this agent has no task network")
	}
	if err := m.cfg.Network.Unavailable(); err != nil {
		return fmt.Errorf("network: bridge is not available on instance %s: %w", m.cfg.Instance, err)
	}
	ctx, cancel := context.WithTimeout(m.runCtxNow(), networkTimeout)
	defer cancel()
	hname, holder := m.holderDriver(def)

	if rec != nil && rec.Attachment != nil && !rec.Released {
		err := m.cfg.Network.Adopt(*rec.Attachment)
		if err == nil && rec.Holder != nil {
			// The holder must still run for the task's docker containers
			// to join; a new one would hold another namespace.
			err = m.cfg.Drivers[rec.Holder.Driver].Recover(ctx, *rec.Holder)
		}
		if err == nil {
			return nil
		}
		m.log.Warn("the task's network namespace is gone; setting it up again", "task", key, "err", err)
	}
	if rec != nil {
		// Whatever an earlier run left (half set up, or gone stale).
		m.teardownNetwork(e)
	}

	rec = &taskNetwork{}
	req := tasknet.Request{TaskUID: uid, Ports: requestedPorts(def), Transparent: def.GetMesh().GetTransparent()}
	if holder != nil {
		h, pid, err := holder.HoldNetns(ctx, key, uid)
		if err != nil {
			return fmt.Errorf("network: %s holder of the namespace: %w", hname, err)
		}
		rec.Holder, req.HolderPID = &h, pid
	}
	m.setNetwork(e, rec) // before the plugins run: see taskNetwork
	att, err := m.cfg.Network.Setup(ctx, req)
	if err != nil {
		m.teardownNetwork(e)
		return fmt.Errorf("network: %w", err)
	}
	m.setNetwork(e, &taskNetwork{Holder: rec.Holder, Attachment: &att})
	m.log.Info("task network set up", "task", key, "netns", att.Path, "address", att.Address, "ports", att.Ports)
	return nil
}

// setNetwork records the task's network and saves it.
func (m *Manager) setNetwork(e *task, n *taskNetwork) {
	m.mu.Lock()
	e.net = n
	if e.hasReport {
		e.changed(e.snap) // the network is part of the report
	}
	m.broadcastLocked()
	m.mu.Unlock()
	m.persist(e)
	m.signalReporter()
}

// teardownNetwork gives back a task's network, once nothing of it runs:
// the plugins' DEL, the namespace, the holder. Failures are logged: the
// sweep of the next agent start finds what is left.
func (m *Manager) teardownNetwork(e *task) {
	m.mu.Lock()
	rec, uid, key := e.net, e.uid, e.key()
	m.mu.Unlock()
	if rec == nil || rec.Released {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.runCtxNow()), networkTimeout)
	defer cancel()
	att := tasknet.Attachment{TaskUID: uid}
	if rec.Attachment != nil {
		att = *rec.Attachment
	}
	var errs []error
	if m.cfg.Network != nil {
		errs = append(errs, m.cfg.Network.Teardown(ctx, att))
	}
	if rec.Holder != nil {
		if h, ok := m.cfg.Drivers[rec.Holder.Driver].(driver.NetnsHolder); ok {
			errs = append(errs, h.ReleaseNetns(ctx, *rec.Holder))
		}
	}
	if err := errors.Join(errs...); err != nil {
		m.log.Error("cannot tear down the task's network; the next agent start sweeps it", "task", key, "err", err)
	} else {
		m.log.Info("task network torn down", "task", key)
	}
	done := *rec
	done.Released = true
	m.mu.Lock()
	e.net = &done
	if e.hasReport && !e.forgotten {
		e.changed(e.snap) // the report no longer names the namespace
	}
	m.mu.Unlock()
	m.persist(e)
	m.signalReporter()
}

func (m *Manager) runCtxNow() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runCtx
}

// sweepNetworks tears down what the task network holds for tasks that
// are not running here: keep are the uids of the tasks the agent resumes.
func (m *Manager) sweepNetworks(ctx context.Context) {
	if m.cfg.Network == nil || m.cfg.Network.Unavailable() != nil {
		return
	}
	m.mu.Lock()
	keep := make(map[string]bool, len(m.tasks))
	for uid, e := range m.tasks {
		if e.phase != phaseDone && (e.net == nil || !e.net.Released) {
			keep[uid] = true
		}
	}
	m.mu.Unlock()
	swept, err := m.cfg.Network.Sweep(ctx, keep)
	for _, uid := range swept {
		m.log.Warn("removed the network of a task this agent no longer runs", "task_uid", uid)
	}
	if err != nil {
		m.log.Error("cannot sweep task networks", "err", err)
	}
}

// networkStatus is what a report says of the task's network: its mode,
// and for a bridge task its namespace (while it exists), address and
// published ports.
func networkStatus(def *pborch.TaskDefinition, n *taskNetwork) *pborch.TaskNetwork {
	if !isBridge(def) {
		return nil
	}
	st := &pborch.TaskNetwork{Mode: orchestrator.NetworkBridge}
	if n == nil || n.Attachment == nil {
		return st
	}
	a := n.Attachment
	if !n.Released {
		st.NamespacePath = a.Path // gone once released
	}
	if a.Address.IsValid() {
		st.Address = a.Address.Addr().String()
	}
	for _, p := range a.Ports {
		st.Ports = append(st.Ports, &pborch.PortBinding{Name: p.Name, ContainerPort: uint32(p.ContainerPort), HostPort: uint32(p.HostPort), Protocol: p.Protocol})
	}
	return st
}

// NetworkMetadata is a task's network in its metadata.
type NetworkMetadata struct {
	// Mode is "host" or "bridge".
	Mode string `json:"mode"`
	// NamespacePath, Address (with the subnet's length) and Gateway: the
	// bridge task's namespace as set up.
	NamespacePath string         `json:"namespace_path,omitempty"`
	Address       string         `json:"address,omitempty"`
	Gateway       string         `json:"gateway,omitempty"`
	Ports         []tasknet.Port `json:"ports,omitempty"`
}

func networkMetadata(def *pborch.TaskDefinition, n *taskNetwork) NetworkMetadata {
	if !isBridge(def) {
		return NetworkMetadata{Mode: orchestrator.NetworkHost}
	}
	md := NetworkMetadata{Mode: orchestrator.NetworkBridge}
	if n != nil && n.Attachment != nil {
		a := n.Attachment
		md.Ports = a.Ports
		if !n.Released {
			md.NamespacePath = a.Path
		}
		if a.Address.IsValid() {
			md.Address = a.Address.String()
		}
		if a.Gateway.IsValid() {
			md.Gateway = a.Gateway.String()
		}
	}
	return md
}

func netnsOf(n *taskNetwork) string {
	if n == nil || n.Attachment == nil || n.Released {
		return ""
	}
	return n.Attachment.Path
}

func holderOf(n *taskNetwork) string {
	if n == nil || n.Holder == nil || n.Released {
		return ""
	}
	return n.Holder.ID
}
