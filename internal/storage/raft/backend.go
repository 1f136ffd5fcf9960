package raft

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

// Server is a cluster member's identity and addresses.
type Server struct {
	ID         string
	RaftAddr   string
	ServerAddr string
}

// Backend is the replicated storage.Backend. See the package comment.
type Backend struct {
	cfg    Config
	tuning Tuning
	logger *slog.Logger

	raft     *hraft.Raft
	trans    *hraft.NetworkTransport
	pipes    *pipelineTransport // trans, as raft uses it
	fsm      *fsm
	store    *inmem.Store
	wal      *wal.WAL // nil in memory
	walMeta  *metadb.BoltMetaDB
	dirLock  *dirLock // nil in memory
	hadState bool
	raftAddr string // advertised

	// gate: every log write holds it shared; a user restore holds it
	// exclusively, so that no write is in flight while the state is
	// replaced.
	gate sync.RWMutex

	changed  *signal // leader, leadership or server registry changed
	lead     *leadership
	notifyCh chan bool
	observer *hraft.Observer
	obsCh    chan hraft.Observation
	conns    *connPool
	metrics  *metrics
	catch    *catchUp
	nudge    *commitNudge // nil when Tuning.CommitNudge is off

	stop     chan struct{}
	wg       sync.WaitGroup
	shutOnce sync.Once
	shutErr  error
}

var (
	_ storage.Backend    = (*Backend)(nil)
	_ storage.Leadership = (*Backend)(nil)
)

// Open starts this server's Raft node and its state machine. A server with
// no Raft state waits, as a follower without a configuration, until it is
// bootstrapped (Bootstrap) or a leader adds it; a server with state resumes
// from it.
func Open(cfg Config) (*Backend, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b := &Backend{
		cfg:      cfg,
		tuning:   cfg.Tuning.withDefaults(),
		logger:   logger,
		store:    inmem.NewStore(cfg.StoreOptions...),
		changed:  newSignal(),
		lead:     newLeadership(),
		notifyCh: make(chan bool, 8),
		obsCh:    make(chan hraft.Observation, 64),
		stop:     make(chan struct{}),
		catch:    newCatchUp(),
	}
	b.conns = newConnPool(cfg.DialOptions)
	b.fsm = newFSM(b.store, logger, b.changed.notify)
	b.metrics = newMetrics(b)
	hlog := newHCLogAdapter(logger, "raft")

	logs, stable, snaps, err := b.openStores()
	if err != nil {
		return nil, err
	}
	b.hadState, err = hraft.HasExistingState(logs, stable, snaps)
	if err != nil {
		b.closeStores()
		return nil, fmt.Errorf("raft storage: reading existing state: %w", err)
	}

	var advertise net.Addr
	if cfg.RaftAdvertiseAddr != "" {
		if advertise, err = net.ResolveTCPAddr("tcp", cfg.RaftAdvertiseAddr); err != nil {
			b.closeStores()
			return nil, fmt.Errorf("%w: RaftAdvertiseAddr %q: %v", ErrInvalidConfig, cfg.RaftAdvertiseAddr, err)
		}
	}
	netCfg := &hraft.NetworkTransportConfig{
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  newHCLogAdapter(logger, "raft-net"),
	}
	if cfg.TLS != nil {
		var stream *tlsStreamLayer
		if stream, err = newTLSStreamLayer(cfg.RaftAddr, advertise, cfg.TLS); err == nil {
			netCfg.Stream = stream
			b.trans = hraft.NewNetworkTransportWithConfig(netCfg)
		}
	} else {
		b.trans, err = hraft.NewTCPTransportWithConfig(cfg.RaftAddr, advertise, netCfg)
	}
	if err != nil {
		b.closeStores()
		return nil, fmt.Errorf("raft storage: listening on RaftAddr %q: %w", cfg.RaftAddr, err)
	}
	b.raftAddr = string(b.trans.LocalAddr())

	rc := hraft.DefaultConfig()
	rc.LocalID = hraft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = b.tuning.HeartbeatTimeout
	rc.ElectionTimeout = b.tuning.ElectionTimeout
	rc.LeaderLeaseTimeout = b.tuning.LeaderLeaseTimeout
	rc.CommitTimeout = b.tuning.CommitTimeout
	rc.SnapshotInterval = b.tuning.SnapshotInterval
	rc.SnapshotThreshold = b.tuning.SnapshotThreshold
	rc.TrailingLogs = b.tuning.TrailingLogs
	rc.NotifyCh = b.notifyCh
	// A removed server stays up as a follower outside the configuration
	// (it can be added again) instead of stopping its Raft node under the
	// process's feet.
	rc.ShutdownOnRemove = false
	// Let the leader batch concurrent Applies into one disk write, and
	// carry up to 256 entries per disk write and per AppendEntries (raft's
	// default is 64). A fleet's task reports are thousands of small writes
	// at once; with 64 they queued in Raft behind one another, and a
	// scheduler's progress write behind them (measured: a fresh deployment
	// to 5,000 simulated instances on 3 servers, 3.3-4.1 s against
	// 4.5-5.5 s, and less CPU). The cost: a follower that is far behind
	// receives up to 256 entries in one message.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.Logger = hlog
	if err := hraft.ValidateConfig(rc); err != nil {
		_ = b.trans.Close()
		b.closeStores()
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}

	b.pipes = newPipelineTransport(b.trans)
	b.raft, err = hraft.NewRaft(rc, b.fsm, logs, stable, snaps, b.pipes)
	if err != nil {
		_ = b.trans.Close()
		b.closeStores()
		return nil, fmt.Errorf("raft storage: starting raft: %w", err)
	}
	b.observer = hraft.NewObserver(b.obsCh, false, func(o *hraft.Observation) bool {
		switch o.Data.(type) {
		case hraft.LeaderObservation, hraft.RaftState, hraft.PeerObservation:
			return true
		}
		return false
	})
	b.raft.RegisterObserver(b.observer)

	if b.tuning.CommitNudge > 0 {
		b.nudge = newCommitNudge(b.tuning.CommitNudge)
		b.wg.Add(1)
		go func() { defer b.wg.Done(); b.runCommitNudge() }()
	}
	b.wg.Add(3)
	go func() { defer b.wg.Done(); b.runLeadership() }()
	go func() { defer b.wg.Done(); b.runObserver() }()
	go func() { defer b.wg.Done(); b.runCatchUp() }()
	logger.Info("raft storage started", "id", cfg.ID, "raft_addr", b.raftAddr, "server_addr", cfg.ServerAddr,
		"data_dir", cfg.DataDir, "existing_state", b.hadState)
	return b, nil
}

// openStores opens the log, stable and snapshot stores: a write-ahead log
// (raft-wal: one fsync per append, where BoltDB needs two) that is also the
// stable store, and snapshot files, under DataDir/raft; or raft's
// in-memory stores.
func (b *Backend) openStores() (hraft.LogStore, hraft.StableStore, hraft.SnapshotStore, error) {
	if b.cfg.DataDir == "" {
		return hraft.NewInmemStore(), hraft.NewInmemStore(), hraft.NewInmemSnapshotStore(), nil
	}
	dir := filepath.Join(b.cfg.DataDir, "raft")
	if err := os.MkdirAll(filepath.Join(dir, "wal"), 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("raft storage: DataDir: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("raft storage: DataDir %q: %w", b.cfg.DataDir, err)
	}
	b.dirLock = lock
	// The WAL's metadata store is ours to close: WAL.Close leaves a
	// default one open (and locked), so a restart in the same process
	// would wait on it forever.
	b.walMeta = &metadb.BoltMetaDB{}
	w, err := wal.Open(filepath.Join(dir, "wal"), wal.WithMetaStore(b.walMeta),
		wal.WithLogger(newHCLogAdapter(b.logger, "raft-wal")))
	if err != nil {
		b.closeStores()
		return nil, nil, nil, fmt.Errorf("raft storage: opening the log in %s: %w", filepath.Join(dir, "wal"), err)
	}
	b.wal = w
	logs := newLogCache(w, logCacheEntries, logCacheBytes)
	snaps, err := hraft.NewFileSnapshotStoreWithLogger(dir, b.tuning.SnapshotRetain, newHCLogAdapter(b.logger, "raft-snapshot"))
	if err != nil {
		b.closeStores()
		return nil, nil, nil, fmt.Errorf("raft storage: snapshot store: %w", err)
	}
	return logs, w, snaps, nil
}

func (b *Backend) closeStores() {
	if b.wal != nil {
		if err := b.wal.Close(); err != nil {
			b.logger.Error("closing raft log store", "error", err)
		}
	}
	if b.walMeta != nil {
		if err := b.walMeta.Close(); err != nil {
			b.logger.Error("closing raft log metadata", "error", err)
		}
	}
	if b.dirLock != nil {
		b.dirLock.release()
	}
}

// ID is this server's Raft id.
func (b *Backend) ID() string { return b.cfg.ID }

// RaftAddr is the Raft address other servers dial (the real port when the
// configured one was 0).
func (b *Backend) RaftAddr() string { return b.raftAddr }

// ServerAddr is this server's advertised server-to-server address.
func (b *Backend) ServerAddr() string { return b.cfg.ServerAddr }

// Self describes this server.
func (b *Backend) Self() Server {
	return Server{ID: b.cfg.ID, RaftAddr: b.raftAddr, ServerAddr: b.cfg.ServerAddr}
}

// Store is the local state store (read-only use: tests, diagnostics).
func (b *Backend) Store() *inmem.Store { return b.store }

// HadState reports whether Open found existing Raft state (a restart).
func (b *Backend) HadState() bool { return b.hadState }

// HasState reports whether this server belongs to a cluster: it had state,
// was bootstrapped, or has received a configuration from a leader.
func (b *Backend) HasState() bool {
	if b.hadState || b.raft.LastIndex() > 0 {
		return true
	}
	f := b.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// Changed returns a channel closed at the next change of the leader, of
// this server's leadership or of the server registry.
func (b *Backend) Changed() <-chan struct{} { return b.changed.wait() }

// LeaderCh implements storage.Leadership: true once this server is the
// leader and its state has caught up with everything committed before,
// false when it stops being the leader. Each call is a new subscription;
// the channel is closed when the backend shuts down.
func (b *Backend) LeaderCh() <-chan bool { return b.lead.subscribe() }

// IsLeader reports whether this server is the Raft leader now.
func (b *Backend) IsLeader() bool { return b.raft.State() == hraft.Leader }

// Leader returns the leader's id and Raft address, empty when none is known.
func (b *Backend) Leader() (id, raftAddr string) {
	addr, lid := b.raft.LeaderWithID()
	return string(lid), string(addr)
}

// WaitReady blocks until this server can serve every request: it is the
// leader and caught up, or it knows a leader and that leader's server-to-server address.
func (b *Backend) WaitReady(ctx context.Context) error {
	for {
		ch := b.changed.wait()
		if b.ready() {
			return nil
		}
		select {
		case <-ch:
		case <-b.stop:
			return ErrShutdown
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", storage.ErrUnavailable, ctx.Err())
		case <-time.After(100 * time.Millisecond):
			// Raft's observations are dropped when the observer is slow;
			// look again now and then.
		}
	}
}

// Ready reports, without waiting, what WaitReady waits for (for health
// checks).
func (b *Backend) Ready() bool { return b.ready() }

func (b *Backend) ready() bool {
	if b.IsLeader() {
		return b.lead.readyIn(b.raft.CurrentTerm())
	}
	id, _ := b.Leader()
	if id == "" || id == b.cfg.ID {
		return false
	}
	_, ok := b.fsm.server(id)
	return ok
}

// Shutdown stops the Raft node and releases everything. Writes in flight
// fail with an error wrapping storage.ErrUnavailable. It is safe to call
// more than once.
func (b *Backend) Shutdown() error {
	b.shutOnce.Do(func() {
		b.logger.Info("raft storage shutting down", "id", b.cfg.ID)
		shut := b.raft.Shutdown()
		// A replication goroutine blocked in a pipeline nobody reads
		// would hold the shutdown forever (pipelines.go).
		b.pipes.closePipelines()
		b.shutErr = shut.Error()
		b.raft.DeregisterObserver(b.observer)
		close(b.stop)
		b.lead.close()
		b.wg.Wait()
		b.conns.close()
		b.closeStores()
	})
	return b.shutErr
}

func (b *Backend) isShutdown() bool {
	select {
	case <-b.stop:
		return true
	default:
		return false
	}
}

// runObserver turns raft's observations into change signals.
func (b *Backend) runObserver() {
	for {
		select {
		case <-b.obsCh:
			b.changed.notify()
		case <-b.stop:
			return
		}
	}
}

// runLeadership follows raft's leadership notifications. On gaining
// leadership it starts a session that catches the state up and announces
// leadership; on losing it, it ends the session and steps down.
func (b *Backend) runLeadership() {
	var cancel context.CancelFunc
	var sessions sync.WaitGroup
	defer sessions.Wait()
	for {
		select {
		case isLeader := <-b.notifyCh:
			if isLeader {
				if cancel != nil {
					continue
				}
				var ctx context.Context
				ctx, cancel = context.WithCancel(context.Background())
				sessions.Add(1)
				go func() { defer sessions.Done(); b.leaderSession(ctx) }()
			} else {
				if cancel != nil {
					cancel()
					cancel = nil
				}
				b.lead.stepDown()
				b.logger.Info("raft leadership lost", "id", b.cfg.ID)
			}
			b.changed.notify()
		case <-b.stop:
			if cancel != nil {
				cancel()
			}
			return
		}
	}
}

// leaderSession runs while this server is the leader: it waits until
// everything committed in earlier terms is applied (a barrier, as Consul
// does), records this server's addresses in the registry so that followers
// can forward to it, and then announces leadership.
func (b *Backend) leaderSession(ctx context.Context) {
	// No jitter: the retries are against this server's own Raft node.
	retry := backoff.Waiter{Policy: backoff.Policy{Base: 10 * time.Millisecond, Max: time.Second}}
	// The barrier is issued in this term or a later one; announcing this
	// term is then safe (a later term makes the announcement useless, and
	// that term's own session announces it).
	term := b.raft.CurrentTerm()
	for {
		err := b.raft.Barrier(0).Error()
		if err == nil {
			break
		}
		if ctx.Err() != nil || errors.Is(err, hraft.ErrRaftShutdown) {
			return
		}
		b.logger.Warn("leader barrier failed; retrying", "error", err)
		if !retry.Wait(ctx) {
			return
		}
	}
	self := b.Self()
	for {
		if cur, ok := b.fsm.server(self.ID); ok && cur == self {
			break
		}
		_, err := b.applyLocal(ctx, registerCommand(self))
		if err == nil {
			continue
		}
		if ctx.Err() != nil || b.isShutdown() {
			return
		}
		b.logger.Warn("recording the leader's addresses failed; retrying", "error", err)
		if !retry.Wait(ctx) {
			return
		}
	}
	if b.lead.announce(term, func() bool { return ctx.Err() == nil && b.IsLeader() }) {
		b.logger.Info("raft leadership gained", "id", b.cfg.ID, "term", term)
		b.changed.notify()
	}
}
