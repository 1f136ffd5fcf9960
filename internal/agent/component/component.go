package component

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net/netip"
	"time"

	"google.golang.org/grpc"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/leaves"
	"trellis.dev/trellis/internal/informer"
)

// Component is one part of the agent beside its tasks (see the package
// comment for when each method is called).
type Component interface {
	// Name names the component in logs, errors and the task records: it
	// must not change from one agent version to the next, or a restarted
	// agent takes its hooks for another component's.
	Name() string
	// Start runs the component until ctx ends (it then returns nil) or it
	// fails. A component with nothing long-lived just waits for ctx.
	Start(ctx context.Context) error
	// Prestart prepares the task, after its network namespace exists and
	// before its first container starts. An error fails the task's start.
	// A component with nothing to do for the task returns nil.
	Prestart(ctx context.Context, t Task) error
	// Poststop cleans up after the task, after its last container has
	// exited and before its network namespace is torn down. It is called
	// only for a task whose Prestart this component was called for.
	Poststop(ctx context.Context, t Task) error
}

// Selective is a component whose hooks concern some tasks only (a mesh
// task's): the agent calls its Prestart and Poststop, and records their
// progress in the task's record, only for the tasks it applies to, so
// that every other task costs it nothing. Applies must be a pure function
// of the task (of its definition, say): it is asked again after a
// restart.
type Selective interface {
	Applies(t Task) bool
}

// Maker makes a component from what it may use of the agent. The agent
// calls it once, when it is made.
type Maker func(d Deps) (Component, error)

// Deps is what a component may use of the agent that composes it.
type Deps struct {
	// Instance is the name of the agent's Instance; Address the host it
	// is reached at (Instance.address without its port): a host task's
	// address.
	Instance string
	Address  string
	// Servers is the agent's link to the servers.
	Servers Servers
	// Informer is the agent's one indexed cache of what its components
	// follow, over the same link: a component declares the types it
	// follows (Informer.Declare) in its Maker, then reads them and
	// subscribes to their deltas.
	Informer *informer.Informer
	// Logger is the agent's logger: a component names itself in what it
	// logs (Logger.With("component", name)).
	Logger *slog.Logger
	// Clock is the agent's time source (tests inject theirs).
	Clock Clock
	// Datacenter is the agent's datacenter (its leaves' SPIFFE ids name
	// it).
	Datacenter string
	// Leaves is the agent's leaf cache, which holds a leaf for the
	// service of every task the agent runs (a mesh task's: its mesh
	// block's service); nil when the agent runs without one.
	Leaves Leaves
}

// Leaves is the agent's leaf cache as a component reads it
// (leaves.Cache).
type Leaves interface {
	// Get returns key's leaf, waiting until it is signed or ctx ends.
	Get(ctx context.Context, key leaves.Key) (*tls.Certificate, *x509.CertPool, error)
	// Changed is closed at the cache's next change (a leaf signed or
	// renewed, the roots changed).
	Changed() <-chan struct{}
}

// Servers is the agent's link to the servers, for a component's calls.
type Servers interface {
	// Call calls fn with the connection to the server the agent is on,
	// as the agent (its instance and session in the call's metadata, so
	// that it may write the status keys the agent owns). It waits for a
	// connection while there is none, and calls fn again on the next one
	// when fn's error says the server went away (codes.Unavailable); any
	// other error is returned as is, as is ctx's when it ends first.
	Call(ctx context.Context, fn func(ctx context.Context, cc grpc.ClientConnInterface) error) error
}

// Clock is the agent's time source.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Task is a task as its hooks see it. A hook may keep it, and must not
// change it (Definition is shared).
type Task struct {
	// ID is the task's id, its uid included.
	ID *pbresource.ID
	// Definition is the task's definition (immutable).
	Definition *pborch.TaskDefinition
	// Network is the task's network: for a bridge task its namespace,
	// set up before Prestart and still there during Poststop.
	Network Network
	// Dir is the task's private directory on the host (its containers'
	// working directory with the exec driver): where a component writes
	// what the task's containers read (a proxy's bootstrap). It exists
	// when Prestart is called.
	Dir string
}

// Network is a task's network.
type Network struct {
	// Mode is "host" or "bridge".
	Mode string
	// NamespacePath is a bridge task's network namespace; Address its
	// address in it (with the subnet's length) and Gateway the bridge's.
	// Zero for a host task.
	NamespacePath string
	Address       netip.Prefix
	Gateway       netip.Addr
	// Ports are the published ports.
	Ports []Port
}

// Port is a published port of a task.
type Port struct {
	// Name names it in the task definition.
	Name string
	// ContainerPort is the port the task listens on (in its namespace);
	// HostPort the host's port that leads to it.
	ContainerPort int
	HostPort      int
	// Protocol is "tcp" or "udp".
	Protocol string
}
