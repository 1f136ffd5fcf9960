package agent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"time"

	"google.golang.org/grpc"

	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/agent/session"
	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/tlsutil"
)

// Defaults of Config.
const (
	DefaultHTTPAddr    = "127.0.0.1:0"
	DefaultReportDelay = 10 * time.Millisecond
	DefaultBackoffMin  = 100 * time.Millisecond
	DefaultBackoffMax  = 10 * time.Second
	// DefaultRPCTimeout bounds each unary call to a server, so that a server
	// that stopped answering (not refusing) is given up on.
	DefaultRPCTimeout = 10 * time.Second
)

// Config says how to run an agent.
type Config struct {
	// Servers are the gRPC addresses (host:port) of the servers, tried in
	// turn.
	Servers []string
	// DataDir keeps the agent's local state: the tasks it runs, their
	// directories and logs.
	DataDir string
	// Name is the Instance's name (a DNS label).
	Name string
	// Cluster is the Instance's cluster; empty means "default".
	Cluster string
	// Attributes are the operator's attributes (-attribute key=value). They
	// override stored values of the same key at every registration.
	Attributes map[string]string
	// Drivers are the task drivers, by name ("exec", "docker"). Each is
	// fingerprinted at start; available ones become driver.<name>
	// attributes.
	Drivers map[string]driver.Driver
	// NewRunner makes the runner of one task (the lifecycle engine).
	// Required.
	NewRunner NewRunnerFunc
	// Admit, when set, is asked before a task starts; see AdmitFunc.
	Admit AdmitFunc
	// Components make the agent's components (package component), in the
	// order their Prestarts run; nil means DefaultComponents().
	Components []component.Maker

	// HTTPAddr is where the tasks' metadata endpoint listens (host:port;
	// port 0 picks one, and a restarted agent tries the port it had
	// before, so that the metadata URIs its tasks hold keep working). It
	// serves the metadata endpoint alone, each task its own by its secret
	// token: the control API is on ControlSocket.
	HTTPAddr string
	// ControlSocket is the path of the control API's Unix socket (self,
	// leave, leaves, logs), made with mode 0600; ControlSocket(DataDir)
	// when empty.
	ControlSocket string
	// ControlAddr, when set, is a TCP address where the control API is
	// served too, for operators on other machines: only with ControlTLS,
	// which must require client certificates (tlsutil's
	// IncomingControlConfig). New refuses ControlAddr without it.
	ControlAddr string
	ControlTLS  *tls.Config
	// AdvertiseAddr is the address written to Instance.address; empty
	// means the local API's address (with an unspecified host replaced by
	// the address this host reaches the first server from).
	AdvertiseAddr string
	// Token is the ACL token sent with every RPC (resource.TokenMetadataKey).
	Token string
	// Version is the agent's version (Instance.agent_version); empty means
	// the binary's module version.
	Version string

	Logger *slog.Logger
	Clock  Clock

	// ReportDelay is how long the reporter waits after a change for more
	// before it writes (they go in the same batch).
	ReportDelay time.Duration
	// BackoffMin and BackoffMax bound the wait between connection attempts.
	BackoffMin, BackoffMax time.Duration
	// RPCTimeout bounds each unary RPC.
	RPCTimeout time.Duration
	// DialOptions are added to those of every connection (tests count
	// RPCs with interceptors).
	DialOptions []grpc.DialOption
	// TLS, when set, is how the agent dials the servers' public gRPC port
	// (tlsutil's OutgoingClientConfig: only a server of the cluster's CA
	// is accepted); nil dials in plaintext.
	TLS *tls.Config

	// Datacenter is the servers' datacenter (tlsutil.DefaultDatacenter
	// when empty): the agent's leaves name it.
	Datacenter string
	// ResignWindow spreads the re-signing of the leaves after the Connect
	// CA's active root changes (leaves.DefaultResignWindow when zero).
	ResignWindow time.Duration
	// DisableLeafCache turns the leaf cache off: the agent then holds no
	// Connect CA leaf (the simulator's thousands of agents).
	DisableLeafCache bool
	// DisableTaskLogs keeps no link for the servers' reads of task logs
	// (the simulator's thousands of agents, whose tasks write nothing):
	// `trellis task logs` then answers that the agent is connected to no
	// server.
	DisableTaskLogs bool
	// Network configures bridge task networking (network: bridge): the
	// bridge, its subnet, where the CNI plugins are. Nil: this instance
	// runs no bridge tasks (network.bridge=false), as the simulator's.
	Network *NetworkConfig

	// AutoEncrypt makes the agent present its agent leaf (from the leaf
	// cache) to the servers: it gets it over server-authenticated TLS
	// first, then every connection is mutual TLS with it, the leaf
	// renewed without reconnecting. It needs TLS.
	AutoEncrypt bool
}

// SystemClock is the real clock.
type SystemClock struct{}

func (SystemClock) Now() time.Time                         { return time.Now() }
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// ErrConfig is wrapped by every refusal of a Config.
var ErrConfig = errors.New("bad agent configuration")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrConfig, field, fmt.Sprintf(format, args...))
}

// Validate checks the configuration. Field names are the flags of
// `trellis agent`.
func (c Config) Validate() error {
	if len(c.Servers) == 0 {
		return configError("-server", "at least one server gRPC address (host:port) is required")
	}
	seen := make(map[string]bool, len(c.Servers))
	for _, s := range c.Servers {
		if err := validateDialAddr(s); err != nil {
			return configError("-server", "%v (a server's gRPC address, for example 127.0.0.1:7701)", err)
		}
		if seen[s] {
			return configError("-server", "%q is given twice", s)
		}
		seen[s] = true
	}
	if c.DataDir == "" {
		return configError("-data-dir", "required: the directory where the agent keeps the state of its tasks")
	}
	if err := resource.ValidateName("-name", c.Name); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if c.Cluster != "" {
		if err := resource.ValidateName("-cluster", c.Cluster); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if len(c.Attributes) > orchestrator.MaxAttributes/2 {
		return configError("-attribute", "%d attributes are too many (at most %d)", len(c.Attributes), orchestrator.MaxAttributes/2)
	}
	for k, v := range c.Attributes {
		if err := orchestrator.ValidateAttributeKey("-attribute", k); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
		if session.BuiltinAttribute(k) {
			return configError("-attribute", "%q is a built-in attribute, which the agent sets itself", k)
		}
		if len(v) > orchestrator.MaxAttributeValueLength {
			return configError("-attribute", "the value of %q is over %d characters", k, orchestrator.MaxAttributeValueLength)
		}
	}
	for name, d := range c.Drivers {
		if d == nil {
			return configError("Drivers", "driver %q is nil", name)
		}
	}
	if c.Datacenter != "" {
		if err := tlsutil.CheckDatacenter(c.Datacenter); err != nil {
			return configError("-datacenter", "%v", err)
		}
	}
	if c.ResignWindow < 0 {
		return configError("-ca-resign-window", "%v is negative", c.ResignWindow)
	}
	if c.AutoEncrypt && c.TLS == nil {
		return configError("-auto-encrypt", "needs -tls-ca-file: the agent gets its leaf over TLS, checking the servers against that CA")
	}
	if c.AutoEncrypt && c.DisableLeafCache {
		return configError("-auto-encrypt", "needs the leaf cache, which holds the agent's leaf")
	}
	if c.Network != nil {
		if err := c.Network.tasknetConfig("/").Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if c.ControlAddr != "" {
		if _, _, err := net.SplitHostPort(c.ControlAddr); err != nil {
			return configError("-control-addr", "%q is not host:port", c.ControlAddr)
		}
		if c.ControlTLS == nil {
			return configError("-control-addr", "needs TLS: the control API stops tasks and reads their logs, so over TCP it is served only with -control-tls-cert-file, -control-tls-key-file and -tls-ca-file (clients present a certificate of that CA)")
		}
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return configError("-http-addr", "%q is not host:port", c.HTTPAddr)
		}
	}
	return nil
}

func validateDialAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Cluster == "" {
		c.Cluster = orchestrator.DefaultCluster
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = DefaultHTTPAddr
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.ReportDelay <= 0 {
		c.ReportDelay = DefaultReportDelay
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(DefaultBackoffMax, c.BackoffMin)
	}
	if c.RPCTimeout <= 0 {
		c.RPCTimeout = DefaultRPCTimeout
	}
	if c.Version == "" {
		c.Version = buildVersion()
	}
	if c.Datacenter == "" {
		c.Datacenter = tlsutil.DefaultDatacenter
	}
	if c.ControlSocket == "" {
		c.ControlSocket = ControlSocket(c.DataDir)
	}
	return c
}

func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}
