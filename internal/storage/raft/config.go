package raft

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage/inmem"
)

// Config says where a server keeps its Raft state and how it is reached.
type Config struct {
	// ID is this server's Raft id; it must never change for a data dir.
	ID string
	// DataDir holds the Raft log, stable store and snapshots. Empty keeps
	// everything in memory (tests, throwaway dev servers).
	DataDir string
	// RaftAddr is the TCP address the Raft transport listens on. Port 0
	// picks a free port (see Backend.RaftAddr).
	RaftAddr string
	// RaftAdvertiseAddr is the address other servers dial; it defaults to
	// the listener's address and must be set when RaftAddr's host is
	// unspecified (0.0.0.0).
	RaftAdvertiseAddr string
	// ServerAddr is the address other servers dial to reach this server's
	// server-to-server gRPC port (the forwarding service). It is recorded in the replicated
	// server registry.
	ServerAddr string
	// Logger receives the backend's and Raft's logs. Nil discards them.
	Logger *slog.Logger
	// Tuning holds Raft timings and snapshot policy; zero fields default.
	Tuning Tuning
	// StoreOptions configure the in-memory state store (watch buffers).
	StoreOptions []inmem.Option
	// DialOptions are used to dial other servers' server-to-server ports.
	// The default is plaintext.
	DialOptions []grpc.DialOption
	// TLS, when set, runs the Raft transport over mutual TLS; nil is
	// plaintext TCP.
	TLS *TLS
	// Sealed reports the types whose resources hold secrets no read may
	// carry off a server (resource.Registry.IsSealed): the forwarding
	// service never returns them, and a follower reads them strongly from
	// its own store after a read-index barrier (sealed.go). Nil seals
	// nothing.
	Sealed func(*pbresource.Type) bool
}

// Tuning holds Raft's timings and snapshot policy. A zero field takes the
// value of DefaultTuning.
type Tuning struct {
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// CommitNudge is how long the leader waits, after a write is applied
	// with nothing appended since, before it appends a barrier that tells
	// the followers of the commit (commitnudge.go). Negative turns it off.
	CommitNudge time.Duration
	// SnapshotInterval is how often Raft checks whether to snapshot;
	// SnapshotThreshold is how many log entries since the last snapshot
	// make it do so; TrailingLogs is how many entries a snapshot leaves in
	// the log for slow followers.
	SnapshotInterval  time.Duration
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// SnapshotRetain is how many snapshots are kept on disk.
	SnapshotRetain int
	// HoldTimeout bounds how long a request waits for a leader (during an
	// election) before failing with storage.ErrUnavailable.
	HoldTimeout time.Duration
}

// DefaultTuning is for servers on one LAN, and is what a raft
// multiplier of 1 gives (see Scaled).
//
// A follower that hears nothing from the leader for a heartbeat timeout
// (randomized between 1 and 2 times it) calls an election; the leader
// sends a heartbeat every tenth of it. hashicorp/raft's own default, and
// Consul's base value, is 1 s; here it is 500 ms. The reason: a follower
// still grants no vote while it believes in a leader, so after a leader
// dies the election waits for the *last* survivor to time out, which
// takes up to three heartbeat timeouts (its timer may have just been
// re-armed). Measured with bench/cmd/failoverbench (3 servers on
// loopback under writes, SIGKILL of the leader to the first write
// acknowledged): 1.4-2.6 s at 1 s, so a bound of 3 s would hang on
// luck; 0.7-1.8 s over 30 kills, median 1.1 s, at 500 ms. Missing 10
// heartbeats in a row still takes a stall of half a second, which a
// dedicated server on a LAN does not have; slower networks and busy or
// shared machines raise the multiplier. The election timeout matches
// the heartbeat timeout, and the leader lease (a leader that has not
// heard from a quorum within it steps down) is half of it, the ratios
// of raft's defaults.
//
// CommitTimeout is raft's 50 ms. A follower learns that an entry is
// committed, and applies it, only on the leader's next AppendEntries,
// which after the last write of a quiet spell comes 50-100 ms later, so
// whatever followers serve from their own store (the catalog's reads and
// watches, DNS) would lag by that much. 15 ms cut that lag (a write seen
// by 1,000 watchers over 3 servers: p99 122 -> 58 ms) but cost the
// leader 1.5x the CPU of a fresh deployment to 5,000 instances and 0.04
// core at rest (bench/README.md, session 16). CommitNudge (5 ms) cuts it
// instead, with one barrier after the last write of a burst.
func DefaultTuning() Tuning {
	return Tuning{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		CommitTimeout:      50 * time.Millisecond,
		CommitNudge:        5 * time.Millisecond,
		SnapshotInterval:   120 * time.Second,
		SnapshotThreshold:  8192,
		TrailingLogs:       10240,
		SnapshotRetain:     2,
		HoldTimeout:        7 * time.Second,
	}
}

// MaxRaftMultiplier bounds Scaled's multiplier, as Consul bounds its
// raft_multiplier: beyond it a dead leader goes unnoticed for longer than
// any network needs.
const MaxRaftMultiplier = 10

// Scaled returns t with its failure-detection timings (heartbeat,
// election and leader lease timeouts) multiplied by m, as Consul's
// raft_multiplier does: a larger m tolerates slow networks and busy or
// shared machines without needless elections, at the cost of noticing a
// dead leader later (about m × 1-1.5 s with DefaultTuning). Commit timing
// and snapshots are unchanged. m < 1 is 1.
func (t Tuning) Scaled(m int) Tuning {
	if m < 1 {
		m = 1
	}
	t.HeartbeatTimeout *= time.Duration(m)
	t.ElectionTimeout *= time.Duration(m)
	t.LeaderLeaseTimeout *= time.Duration(m)
	return t
}

// DevTuning is for a single-server cluster (trellis dev): it elects itself
// within tens of milliseconds. Not for multi-server clusters.
func DevTuning() Tuning {
	t := DefaultTuning()
	t.HeartbeatTimeout = 50 * time.Millisecond
	t.ElectionTimeout = 50 * time.Millisecond
	t.LeaderLeaseTimeout = 50 * time.Millisecond
	t.CommitTimeout = 5 * time.Millisecond
	t.CommitNudge = -1 // no followers to tell
	return t
}

// withDefaults fills zero fields from DefaultTuning.
func (t Tuning) withDefaults() Tuning {
	d := DefaultTuning()
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setDur(&t.HeartbeatTimeout, d.HeartbeatTimeout)
	setDur(&t.ElectionTimeout, d.ElectionTimeout)
	setDur(&t.LeaderLeaseTimeout, d.LeaderLeaseTimeout)
	setDur(&t.CommitTimeout, d.CommitTimeout)
	setDur(&t.CommitNudge, d.CommitNudge)
	setDur(&t.SnapshotInterval, d.SnapshotInterval)
	setDur(&t.HoldTimeout, d.HoldTimeout)
	if t.SnapshotThreshold == 0 {
		t.SnapshotThreshold = d.SnapshotThreshold
	}
	if t.TrailingLogs == 0 {
		t.TrailingLogs = d.TrailingLogs
	}
	if t.SnapshotRetain == 0 {
		t.SnapshotRetain = d.SnapshotRetain
	}
	return t
}

// ErrInvalidConfig wraps every configuration error.
var ErrInvalidConfig = errors.New("invalid raft storage configuration")

// validate checks the fields Open relies on and names the one at fault.
func (c Config) validate() error {
	if c.ID == "" {
		return fmt.Errorf("%w: ID is empty", ErrInvalidConfig)
	}
	if c.RaftAddr == "" {
		return fmt.Errorf("%w: RaftAddr is empty", ErrInvalidConfig)
	}
	if _, _, err := net.SplitHostPort(c.RaftAddr); err != nil {
		return fmt.Errorf("%w: RaftAddr %q: %v", ErrInvalidConfig, c.RaftAddr, err)
	}
	if c.RaftAdvertiseAddr != "" {
		if err := checkDialable("RaftAdvertiseAddr", c.RaftAdvertiseAddr); err != nil {
			return err
		}
	}
	if err := checkDialable("ServerAddr", c.ServerAddr); err != nil {
		return err
	}
	t := c.Tuning
	if t.HeartbeatTimeout < 0 || t.ElectionTimeout < 0 || t.LeaderLeaseTimeout < 0 || t.CommitTimeout < 0 ||
		t.SnapshotInterval < 0 || t.HoldTimeout < 0 || t.SnapshotRetain < 0 {
		return fmt.Errorf("%w: Tuning has a negative value", ErrInvalidConfig)
	}
	return nil
}

// checkDialable refuses addresses other servers could not dial.
func checkDialable(field, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %s %q: %v", ErrInvalidConfig, field, addr, err)
	}
	if port == "" || port == "0" {
		return fmt.Errorf("%w: %s %q: needs a port", ErrInvalidConfig, field, addr)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("%w: %s %q: other servers cannot dial an unspecified host", ErrInvalidConfig, field, addr)
	}
	return nil
}
