package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage/inmem"
	raftstore "trellis.dev/trellis/internal/storage/raft"
)

// Config is a server's place in a cluster (the trellis server flags).
type Config struct {
	// DataDir keeps the node id and the Raft state. Empty keeps everything
	// in memory: a new node id and an empty state on every start.
	DataDir string
	// NodeID overrides the node id. Normally empty: the id is generated on
	// the first start and kept in DataDir/node-id.
	NodeID string
	// RaftAddr is the Raft listen address (-raft-addr).
	RaftAddr string
	// RaftAdvertiseAddr is the Raft address other servers dial, when it
	// differs from RaftAddr (RaftAddr on 0.0.0.0).
	RaftAdvertiseAddr string
	// ServerAddr is this server's server-to-server RPC address as other
	// servers dial it (-server-addr). An unspecified host (0.0.0.0, ::, "") takes the host of
	// the Raft address.
	ServerAddr string
	// BootstrapExpect is how many servers form a new cluster together
	// (-bootstrap-expect); 0 never bootstraps, only joins.
	BootstrapExpect int
	// RetryJoin are server-to-server addresses of other servers (-retry-join), tried
	// with backoff until this server belongs to a cluster.
	RetryJoin []string
	// RetryInterval is the first wait between rounds of join attempts; it
	// doubles up to RetryMaxInterval. Defaults: 250ms and 10s.
	RetryInterval    time.Duration
	RetryMaxInterval time.Duration

	Logger       *slog.Logger
	Tuning       raftstore.Tuning
	StoreOptions []inmem.Option
	// DialOptions are used for every connection to another server. The
	// default is plaintext.
	DialOptions []grpc.DialOption
	// RaftTLS, when set, runs the Raft transport over mutual TLS.
	RaftTLS *raftstore.TLS
	// Sealed reports the types no read on the server port returns
	// (raftstore.Config.Sealed).
	Sealed func(*pbresource.Type) bool
}

// ErrInvalidConfig wraps every configuration error.
var ErrInvalidConfig = errors.New("invalid cluster configuration")

var nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// normalize checks cfg and fills defaults. It touches no files.
func (cfg Config) normalize() (Config, error) {
	if cfg.BootstrapExpect < 0 {
		return cfg, fmt.Errorf("%w: BootstrapExpect is %d, must be 0 or more", ErrInvalidConfig, cfg.BootstrapExpect)
	}
	if cfg.NodeID != "" && !nodeIDPattern.MatchString(cfg.NodeID) {
		return cfg, fmt.Errorf("%w: NodeID %q: letters, digits, '.', '_' and '-', at most 128", ErrInvalidConfig, cfg.NodeID)
	}
	if cfg.RaftAddr == "" {
		return cfg, fmt.Errorf("%w: RaftAddr is empty", ErrInvalidConfig)
	}
	serverAddr, err := advertisedServer(cfg.ServerAddr, cfg.RaftAdvertiseAddr, cfg.RaftAddr)
	if err != nil {
		return cfg, err
	}
	cfg.ServerAddr = serverAddr
	for i, addr := range cfg.RetryJoin {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" {
			return cfg, fmt.Errorf("%w: RetryJoin[%d] %q is not host:port", ErrInvalidConfig, i, addr)
		}
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 250 * time.Millisecond
	}
	if cfg.RetryMaxInterval <= 0 {
		cfg.RetryMaxInterval = 10 * time.Second
	}
	cfg.RetryMaxInterval = max(cfg.RetryMaxInterval, cfg.RetryInterval)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// advertisedServer turns the server-to-server listen address into one other servers can
// dial: an unspecified host takes the host of the Raft address.
func advertisedServer(addr, raftAdvertise, raftAddr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return "", fmt.Errorf("%w: ServerAddr %q must be host:port with a fixed port", ErrInvalidConfig, addr)
	}
	if !unspecified(host) {
		return addr, nil
	}
	for _, a := range []string{raftAdvertise, raftAddr} {
		if h, _, err := net.SplitHostPort(a); err == nil && !unspecified(h) {
			return net.JoinHostPort(h, port), nil
		}
	}
	return "", fmt.Errorf("%w: ServerAddr %q has no host other servers can dial; give one, or a Raft address with a host", ErrInvalidConfig, addr)
}

func unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

const nodeIDFile = "node-id"

// loadNodeID returns the node id kept in dataDir, creating it on the first
// start. A configured id must match the kept one: a data dir belongs to
// one node.
func loadNodeID(dataDir, configured string) (string, error) {
	if dataDir == "" {
		if configured != "" {
			return configured, nil
		}
		return ids.NewUUID()
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("%w: DataDir: %v", ErrInvalidConfig, err)
	}
	path := filepath.Join(dataDir, nodeIDFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		kept := strings.TrimSpace(string(data))
		if !nodeIDPattern.MatchString(kept) {
			return "", fmt.Errorf("%w: %s holds %q, not a node id", ErrInvalidConfig, path, kept)
		}
		if configured != "" && configured != kept {
			return "", fmt.Errorf("%w: NodeID %q, but DataDir %s belongs to node %q", ErrInvalidConfig, configured, dataDir, kept)
		}
		return kept, nil
	case errors.Is(err, os.ErrNotExist):
		id := configured
		if id == "" {
			if id, err = ids.NewUUID(); err != nil {
				return "", err
			}
		}
		if err := writeFileSync(path, []byte(id+"\n")); err != nil {
			return "", fmt.Errorf("keeping the node id: %w", err)
		}
		return id, nil
	default:
		return "", fmt.Errorf("reading the node id: %w", err)
	}
}

// writeFileSync writes a file durably: to a temporary name, synced, then
// renamed into place.
func writeFileSync(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
