package module

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/informer"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// Module is one domain as the server serves it.
type Module interface {
	// Name names the module in errors and logs ("orchestrator").
	Name() string
	// Register adds the module's resource types to r. It is also how the
	// CLI learns the types, to check spec files before sending them, so it
	// must do nothing else.
	Register(r *resource.Registry)
	// Setup builds what the server runs for the module. It is called
	// once, after every module of the server has registered its types.
	Setup(d Deps) (Parts, error)
}

// Deps is what a module may use of the server that composes it.
type Deps struct {
	// API is the resource service, in process: every read and write a
	// module makes goes through it (and its validation and hooks).
	API resource.API
	// Registry holds the types of every module of the server.
	Registry *resource.Registry
	// Leadership returns a new subscription to this server's leadership
	// (each part that follows it needs its own).
	Leadership func() storage.Leadership
	// Cache is the controllers' shared decoded cache, which the controller
	// manager's informers keep: a controller that declares
	// controller.Controller.Cached reads it (see controller.Cache).
	Cache *controller.Cache
	// Informer is this server's indexed cache of its own store, kept on
	// every server, followers too (the controllers' Cache lives on the
	// leader only): a module declares the types it reads in Setup
	// (Informer.Declare), and its routes read them on whichever server
	// is asked, bounded by an index when a read must see a write
	// (Informer.WaitIndex, WaitConsistent; see package informer).
	Informer *informer.Informer
	// Logger is the server's logger; a module names its components.
	Logger *slog.Logger
	// Metrics is the process's Prometheus registry, served at /v1/metrics.
	Metrics prometheus.Registerer
	// Cluster holds what a module may know of the cluster.
	Cluster Cluster
	// ServerCerts is the server's TLS, for the module that makes the
	// server's own certificate (the CA's, unless its
	// -connect-server-certs=false keeps the server on its files); nil
	// when the server serves no TLS.
	ServerCerts ServerCerts
	// ConnectTrust is the server's TLS, for the module that follows the
	// Connect CA's roots (the CA's), which the server's ports then accept
	// agent and server leaves of; nil when the server serves no TLS.
	ConnectTrust ConnectTrust
	// DialServersOf returns the transport credentials to dial the
	// server-to-server port of the servers of another datacenter (a
	// secondary's CA asking the primary's): TLS presenting this server's
	// certificate file and accepting only a server certificate of that
	// datacenter, or plaintext when this server has no TLS files.
	DialServersOf func(datacenter string) credentials.TransportCredentials
}

// ServerCerts is a server's TLS as the maker of its own certificate sees
// it (tlsutil.Configurator).
type ServerCerts interface {
	// ServerNames are the DNS names the server's certificate carries:
	// those peers check a server by.
	ServerNames() []string
	// SetConnectServerCertificate hands over the certificate to present
	// (its chain in Certificate, its key in PrivateKey); nil takes it back.
	SetConnectServerCertificate(cert *tls.Certificate)
}

// ConnectTrust is a server's TLS as the follower of the Connect CA's roots
// sees it (tlsutil.Configurator).
type ConnectTrust interface {
	// SetConnectRoots hands over the CA's roots of trust domain td, and
	// the CAs that sign this datacenter's leaves; no roots accepts none.
	SetConnectRoots(td string, roots, signers []*x509.Certificate)
	// OnConnectReady calls f whenever the server becomes ready to speak
	// Connect on its server ports, with how many Raft links it closed to
	// open them again with its leaf.
	OnConnectReady(f func(closed int))
}

// Cluster is what a module may know of the cluster the server is part of.
type Cluster struct {
	// Datacenter is the server's datacenter (server.Config.Datacenter).
	Datacenter string
	// ServerID names this server among the cluster's: its Raft node id,
	// fixed at its first start (a uuid); an in-memory server has one for
	// the run.
	ServerID string
	// GRPCAddr is the address the public gRPC server listens on.
	GRPCAddr string
	// ServerAddr is the address of this server's server-to-server port,
	// which other servers reach it at; "" in memory, where there is none.
	ServerAddr string
	// LeaderConn returns a connection to the leader's server-to-server
	// port (pooled: do not close it); nil in memory, where this server
	// always leads.
	LeaderConn func() (*grpc.ClientConn, error)
	// LeaderChanged returns a channel closed at the next change of leader
	// or of leadership; nil in memory.
	LeaderChanged func() <-chan struct{}
	// LeaderIndex asks the leader for its applied index (the cluster's
	// read index); nil in memory, where the local index is the cluster's.
	LeaderIndex func(ctx context.Context) (uint64, error)
	// ServerAddrs returns the server-to-server addresses of the cluster's
	// servers (this one's too), and ServerConn a pooled connection to one
	// of them (do not close it): for what is asked of a server other than
	// the leader. Nil in memory.
	ServerAddrs func() []string
	ServerConn  func(addr string) (*grpc.ClientConn, error)
}

// Parts is what the server runs for a module. Every field may be empty.
type Parts struct {
	// Controllers run on this server while it leads.
	Controllers []controller.Controller
	// PublicServices are served on the public gRPC port (agents, clients).
	PublicServices []Service
	// ServerServices are served on the server-to-server port, to the
	// cluster's servers only (those of other datacenters too when the
	// service says AllDatacenters); a server in memory has no such port
	// and serves none of them.
	ServerServices []Service
	// Routes are added to the HTTP API, each checked against the
	// permission it declares.
	Routes []httpapi.Route
	// Runnables are the module's long-lived parts.
	Runnables []Runnable
	// AgentSessions, when set, says whether session is the session the
	// agent of instance registered last: how the server proves that a
	// call to its public port comes from that agent when the agent
	// presents no Connect leaf (it names itself with
	// resource.AgentInstanceMetadataKey and AgentSessionMetadataKey), so
	// that it may write the status keys an agent owns. The module that
	// registers agents sets it; one module at most.
	AgentSessions func(ctx context.Context, instance, session string) (bool, error)
}

// Service is a gRPC service and the permission each of its methods needs.
type Service struct {
	Desc *grpc.ServiceDesc
	Impl any
	// Permissions maps each method's name, as in the .proto ("Heartbeat"),
	// to the permission a caller needs. Every method of Desc must be here.
	Permissions map[string]acl.Permission
	// AllDatacenters serves a server service to the servers of every
	// datacenter of the federation, not only to this datacenter's: its
	// methods check which datacenter the caller is a server of
	// (ServerCallerFrom). Only a server service may say it.
	AllDatacenters bool
}

// Runnable is a long-lived part: Start blocks until ctx ends (then it
// stops and returns nil) or the part fails. A runnable that takes time to
// come up may also have Ready() <-chan struct{}; the server waits for it
// before it starts the next.
type Runnable struct {
	Name string
	Run  interface {
		Start(ctx context.Context) error
	}
}
