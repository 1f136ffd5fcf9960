package raft

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	hraft "github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/storage/inmem"
)

// fsm is the state machine every server applies the Raft log to: resources
// in an inmem.Store, changed at the log entry's index (which the store
// turns into the version), and the server registry. Apply reads nothing
// but the entry and the current state: no clock, no randomness, no ids.
type fsm struct {
	store  *inmem.Store
	logger *slog.Logger
	// onServers is called (on the FSM goroutine) after the registry changed.
	onServers func()

	mu      sync.RWMutex
	servers map[string]*pbstorage.Server

	// applied is the Raft index of the last entry this state machine has
	// applied (commands and configuration changes, which raft hands it;
	// not raft's no-ops). Raft's own AppliedIndex runs ahead of it: raft
	// counts entries applied once it has queued them for the state
	// machine. Catching up is judged on this one.
	applied atomic.Uint64
}

// applyResult is what Apply hands back through raft's ApplyFuture: the
// stored resources, or why the operation was refused (a CAS failure, ...).
type applyResult struct {
	resources []*pbresource.Resource
	err       error
}

func newFSM(store *inmem.Store, logger *slog.Logger, onServers func()) *fsm {
	return &fsm{store: store, logger: logger, onServers: onServers, servers: map[string]*pbstorage.Server{}}
}

var _ hraft.BatchingFSM = (*fsm)(nil)

// Apply applies one committed log entry.
func (f *fsm) Apply(l *hraft.Log) any {
	return f.ApplyBatch([]*hraft.Log{l})[0]
}

// ApplyBatch applies the entries raft committed together. Each run of
// consecutive resource commands is applied in one store transaction (see
// inmem.Tx), each command at its own index and with its own result, so the
// state and the watch events are exactly those of applying the entries one
// by one: the batches differ between leader and followers, and between a
// server's first run and its replay of the log after a restart. Any other
// entry ends a run and is applied by itself.
func (f *fsm) ApplyBatch(logs []*hraft.Log) []any {
	if len(logs) > 0 {
		defer f.advance(logs[len(logs)-1].Index)
	}
	out := make([]any, len(logs))
	// Decode everything first, outside the store's lock.
	cmds := make([]*pbstorage.Command, len(logs))
	for i, l := range logs {
		if l.Type != hraft.LogCommand {
			continue
		}
		cmd := &pbstorage.Command{}
		if err := proto.Unmarshal(l.Data, cmd); err != nil {
			f.logger.Error("raft log entry does not decode; skipped", "index", l.Index, "error", err)
			out[i] = &applyResult{err: invalid("log entry %d does not decode: %v", l.Index, err)}
			continue
		}
		cmds[i] = cmd
	}
	for i := 0; i < len(logs); {
		cmd := cmds[i]
		if cmd == nil {
			i++
			continue
		}
		if !isResourceCommand(cmd) {
			out[i] = f.apply(logs[i].Index, cmd)
			i++
			continue
		}
		end := i + 1
		for end < len(logs) && cmds[end] != nil && isResourceCommand(cmds[end]) {
			end++
		}
		f.store.Update(func(tx *inmem.Tx) {
			for j := i; j < end; j++ {
				out[j] = f.applyResource(tx, logs[j].Index, cmds[j])
			}
		})
		i = end
	}
	return out
}

// applyResource applies a resource command (isResourceCommand) within tx.
func (f *fsm) applyResource(tx *inmem.Tx, idx uint64, cmd *pbstorage.Command) *applyResult {
	if err := checkCommand(cmd); err != nil {
		return f.refuse(idx, err)
	}
	switch op := cmd.GetOp().(type) {
	case *pbstorage.Command_Write:
		res, err := tx.WriteCAS(idx, op.Write.GetResource())
		if err != nil {
			return &applyResult{err: err}
		}
		return &applyResult{resources: []*pbresource.Resource{res}}
	case *pbstorage.Command_WriteBatch:
		out, err := tx.WriteBatch(idx, op.WriteBatch.GetResources(), op.WriteBatch.GetCompares()...)
		return &applyResult{resources: out, err: err}
	case *pbstorage.Command_Delete:
		return &applyResult{err: tx.DeleteCAS(idx, op.Delete.GetId(), op.Delete.GetVersion())}
	}
	return &applyResult{err: fmt.Errorf("unreachable: %T", cmd.GetOp())}
}

// apply applies a command that does not change resources.
func (f *fsm) apply(idx uint64, cmd *pbstorage.Command) *applyResult {
	if err := checkCommand(cmd); err != nil {
		return f.refuse(idx, err)
	}
	switch op := cmd.GetOp().(type) {
	case *pbstorage.Command_RegisterServer:
		s := op.RegisterServer.GetServer()
		f.mu.Lock()
		f.servers[s.GetId()] = s
		f.mu.Unlock()
		f.onServers()
		return &applyResult{}
	case *pbstorage.Command_DeregisterServer:
		f.mu.Lock()
		delete(f.servers, op.DeregisterServer.GetId())
		f.mu.Unlock()
		f.onServers()
		return &applyResult{}
	}
	return &applyResult{err: fmt.Errorf("unreachable: %T", cmd.GetOp())}
}

// refuse is the result of a command this version does not know, or a
// malformed one: the same on every server of this version, so skipping it
// is deterministic.
func (f *fsm) refuse(idx uint64, err error) *applyResult {
	f.logger.Error("raft log entry cannot be applied; skipped", "index", idx, "error", err)
	return &applyResult{err: err}
}

// server returns the registry record of id.
func (f *fsm) server(id string) (Server, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s, ok := f.servers[id]
	if !ok {
		return Server{}, false
	}
	return Server{ID: s.GetId(), RaftAddr: s.GetRaftAddr(), ServerAddr: s.GetServerAddr()}, true
}

// serverList returns the registry ordered by id (for snapshots).
func (f *fsm) serverList() []*pbstorage.Server {
	f.mu.RLock()
	out := make([]*pbstorage.Server, 0, len(f.servers))
	for _, s := range f.servers {
		out = append(out, s)
	}
	f.mu.RUnlock()
	slices.SortFunc(out, func(a, b *pbstorage.Server) int {
		switch {
		case a.GetId() < b.GetId():
			return -1
		case a.GetId() > b.GetId():
			return 1
		}
		return 0
	})
	return cloneServers(out)
}

// advance records that every entry up to idx is applied.
func (f *fsm) advance(idx uint64) {
	if idx > f.applied.Load() {
		f.applied.Store(idx)
	}
}

// Snapshot captures the state for raft. See fsmSnapshot. Raft calls it
// on the FSM's goroutine, between applies, so applied is exactly the
// state's.
func (f *fsm) Snapshot() (hraft.FSMSnapshot, error) {
	return startSnapshot(f.store, f.serverList(), f.applied.Load()), nil
}

// Restore replaces the whole state with a snapshot stream. The resources
// are decoded one by one into the slice the new store is built from, so the
// stream is never held in memory.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var resources []*pbresource.Resource
	tr, err := readSnapshot(rc, func(res *pbresource.Resource) error {
		resources = append(resources, res)
		return nil
	})
	if err != nil {
		return err
	}
	if err := f.store.Restore(tr.GetIndex(), resources); err != nil {
		return fmt.Errorf("restore store: %w", err)
	}
	servers := make(map[string]*pbstorage.Server, len(tr.GetServers()))
	for _, s := range tr.GetServers() {
		servers[s.GetId()] = s
	}
	f.mu.Lock()
	f.servers = servers
	f.mu.Unlock()
	f.onServers()
	// A user snapshot, or an older one, does not say: its store index
	// is the best lower bound (raft's restore sets it past the gap).
	f.applied.Store(max(tr.GetAppliedIndex(), tr.GetIndex()))
	f.logger.Info("restored state from snapshot", "index", tr.GetIndex(), "applied_index", tr.GetAppliedIndex(), "resources", len(resources))
	return nil
}
