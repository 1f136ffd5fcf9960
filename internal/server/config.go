package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/hostport"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/tlsutil"
)

// Default addresses: 7700 HTTP and 7701 public gRPC (people, tools,
// agents); 7702 Raft and 7703 the server-to-server RPCs (servers only).
const (
	DefaultHTTPAddr        = "127.0.0.1:7700"
	DefaultGRPCAddr        = "127.0.0.1:7701"
	DefaultRaftAddr        = "127.0.0.1:7702"
	DefaultServerAddr      = "127.0.0.1:7703"
	DefaultShutdownTimeout = 15 * time.Second
	// DefaultServerLinkMaxAge is Config.ServerLinkMaxAge's default: a
	// handful of handshakes per server every few minutes.
	DefaultServerLinkMaxAge = 2 * time.Minute
	// DefaultGRPCMaxRecvBytes admits the resource service's largest batch
	// (resource.MaxBatchSize, 8 MiB) with room to spare.
	DefaultGRPCMaxRecvBytes = 16 << 20
)

// Config says what server to assemble.
type Config struct {
	HTTPAddr string // host:port; port 0 picks a free one
	// HTTPSAddr, when set, serves the HTTP API over TLS there too (it
	// needs TLS).
	HTTPSAddr string
	GRPCAddr  string
	// RaftAddr is the address other servers reach this one's Raft on; an
	// in-memory server reports it as the leader's address.
	RaftAddr string
	// ServerAddr is the server-to-server gRPC listener: write forwarding,
	// cluster membership (join, remove peer) and heartbeat forwarding,
	// which skip the public services' validation and ACL hooks and so are
	// never served on GRPCAddr. Only a Raft server listens on it.
	ServerAddr string
	// TLS, when set, secures the links between servers: the
	// server-to-server listener and Raft accept only peers with a server
	// certificate of the cluster's CA (mutual TLS), and this server dials
	// them with its own. The public gRPC port and HTTPSAddr serve TLS with
	// the server certificate; a client certificate is asked for, not
	// required, and one presented must be a client certificate of the
	// cluster's CA or an agent leaf of the Connect CA (auto-encrypt),
	// whose roots the server follows. Nil: plaintext.
	TLS *tlsutil.Configurator
	// ServerLinkMaxAge is how long a connection to the server RPCs' port
	// lives before the server ends it gracefully (GOAWAY: calls in flight
	// finish, the client opens a new one): links opened with the
	// certificate files move to Connect CA leaves within it, and links
	// pick up renewed leaves. DefaultServerLinkMaxAge when zero; with TLS
	// only.
	ServerLinkMaxAge time.Duration
	// PublicGRPCOptions are added to the options of the public gRPC
	// server (tests look at each call's peer with an interceptor).
	PublicGRPCOptions []grpc.ServerOption
	// PublicPlaintext keeps the public gRPC port plaintext even with TLS:
	// trellis dev secures its server-to-server port with certificates it
	// makes in memory, which no client outside the process could trust.
	PublicPlaintext bool
	// Datacenter is the datacenter the server is part of
	// (tlsutil.DefaultDatacenter when empty): the Connect CA signs leaves
	// of this datacenter only. A DNS label in lower case.
	Datacenter string
	// Raft, when set, makes the server a Raft voter with durable storage.
	// Nil: everything in memory, this server the leader at once.
	Raft *RaftConfig

	Logger          *slog.Logger
	ShutdownTimeout time.Duration
	// Modules are the domains the server serves, each its types and its
	// parts (internal/module), configured (module.Flagged: its flags)
	// before they are given here; nil means DefaultModules, unconfigured.
	Modules []module.Module
	// Authorize turns the caller's token (resource.TokenFromContext) into
	// an Authorizer, which every HTTP route's and gRPC method's declared
	// permission, and every resource's type hooks, are checked against.
	// Nil allows everything, until ACLs land.
	Authorize func(ctx context.Context) (acl.Authorizer, error)

	// Request limits; zero means the defaults (httpapi.DefaultMax*,
	// DefaultGRPCMaxRecvBytes).
	MaxRequestBytes  int64
	MaxBatchBytes    int64
	GRPCMaxRecvBytes int

	// EnableDebug serves Go's pprof endpoints on the HTTP API.
	EnableDebug bool
}

// RaftConfig is what `trellis server` (and `trellis dev -data-dir`) ask of
// the Raft backend.
type RaftConfig struct {
	DataDir string
	// BootstrapExpect is how many servers to wait for before the first
	// election of a new cluster (0: do not bootstrap; join one).
	BootstrapExpect int
	// RetryJoin lists other servers' gRPC addresses to join through,
	// retried until one answers.
	RetryJoin []string
	// SingleServer tunes Raft for a cluster of one (trellis dev -data-dir):
	// it elects itself within milliseconds. Never for real clusters.
	SingleServer bool
	// RaftMultiplier scales Raft's failure detection (its heartbeat,
	// election and leader lease timeouts, 500, 500 and 250 ms at 1, see
	// raft.DefaultTuning); 0 is 1.
	RaftMultiplier int
}

// ErrConfig is wrapped by every configuration refusal.
var ErrConfig = errors.New("bad configuration")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = DefaultGRPCAddr
	}
	if c.RaftAddr == "" {
		c.RaftAddr = DefaultRaftAddr
	}
	if c.ServerAddr == "" {
		c.ServerAddr = DefaultServerAddr
	}
	if c.Datacenter == "" {
		c.Datacenter = tlsutil.DefaultDatacenter
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.GRPCMaxRecvBytes <= 0 {
		c.GRPCMaxRecvBytes = DefaultGRPCMaxRecvBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks the configuration, naming the flag at fault. Field names
// are the command-line flags of `trellis server`.
func (c Config) Validate() error {
	c = c.withDefaults()
	addrs := []struct{ flag, addr string }{
		{"-http-addr", c.HTTPAddr},
		{"-grpc-addr", c.GRPCAddr},
		{"-raft-addr", c.RaftAddr},
		{"-server-addr", c.ServerAddr},
	}
	if c.HTTPSAddr != "" {
		if c.TLS == nil || c.PublicPlaintext {
			return configError("-https-addr", "serves TLS: give -tls-ca-file, -tls-cert-file and -tls-key-file too")
		}
		addrs = append(addrs, struct{ flag, addr string }{"-https-addr", c.HTTPSAddr})
	}
	for _, a := range addrs {
		if err := ValidateAddr(a.flag, a.addr); err != nil {
			return err
		}
	}
	for i := range addrs {
		for j := i + 1; j < len(addrs); j++ {
			if sameListenAddr(addrs[i].addr, addrs[j].addr) {
				return configError(addrs[j].flag, "%q is also %s; each needs its own port", addrs[j].addr, addrs[i].flag)
			}
		}
	}
	if err := tlsutil.CheckDatacenter(c.Datacenter); err != nil {
		return configError("-datacenter", "%v", err)
	}
	mods := c.Modules
	if mods == nil {
		mods = DefaultModules()
	}
	for _, m := range mods {
		if f, ok := m.(module.Flagged); ok {
			if err := f.CheckFlags(module.Settings{Datacenter: c.Datacenter}); err != nil {
				return fmt.Errorf("%w: %w", ErrConfig, err)
			}
		}
	}
	if c.Raft != nil {
		return c.Raft.validate(c.RaftAddr)
	}
	return nil
}

func (r *RaftConfig) validate(raftAddr string) error {
	if r.DataDir == "" {
		return configError("-data-dir", "required: the directory where this server keeps its Raft log and snapshots")
	}
	host, _, _ := net.SplitHostPort(raftAddr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return configError("-raft-addr", "%q: other servers dial this address, so give a specific host, not %q", raftAddr, host)
	}
	if r.BootstrapExpect < 0 {
		return configError("-bootstrap-expect", "%d: must be 0 (join an existing cluster) or the number of servers to wait for", r.BootstrapExpect)
	}
	seen := make(map[string]bool)
	for _, a := range r.RetryJoin {
		if err := ValidateAddr("-retry-join", a); err != nil {
			return err
		}
		host, port, _ := net.SplitHostPort(a)
		if host == "" || port == "0" {
			return configError("-retry-join", "%q: give the host and server-to-server port (-server-addr) of another server (for example %s)", a, ExampleAddr("-retry-join"))
		}
		if seen[a] {
			return configError("-retry-join", "%q given twice", a)
		}
		seen[a] = true
	}
	return nil
}

// ValidateAddr checks a host:port listen or dial address.
func ValidateAddr(field, addr string) error {
	if err := hostport.Check(addr, ExampleAddr(field)); err != nil {
		return configError(field, "%v", err)
	}
	return nil
}

// ExampleAddr is the address an error about field shows as an example:
// the default address of the port that flag names. Servers join through
// each other's server-to-server port, so an example with another port
// would lead a user to give the wrong one.
func ExampleAddr(field string) string {
	switch field {
	case "-grpc-addr":
		return DefaultGRPCAddr
	case "-server-addr", "-retry-join":
		return DefaultServerAddr
	case "-raft-addr":
		return DefaultRaftAddr
	default:
		return DefaultHTTPAddr
	}
}

// sameListenAddr reports whether two addresses would collide: the same
// port on the same or an overlapping host (port 0 never collides).
func sameListenAddr(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { ip := net.ParseIP(h); return h == "" || (ip != nil && ip.IsUnspecified()) }
	return ha == hb || wild(ha) || wild(hb)
}
