package raft

import (
	"errors"
	"sync"

	hraft "github.com/hashicorp/raft"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/storage/inmem"
)

// fsmSnapshot streams the store's state as of the moment raft asked for it.
//
// Raft calls FSM.Snapshot on the FSM goroutine (no Apply runs meanwhile)
// and Persist later, concurrently with Apply. The snapshot must hold the
// state at exactly the log index raft records for it, or log entries after
// that index would be applied twice after a restore. Store.ForEach iterates
// an MVCC snapshot of the store taken when it starts, so Snapshot starts
// ForEach on its own goroutine and returns only once ForEach has taken that
// snapshot (it has called back once, or finished). The records then flow
// through a small channel to Persist: the resources are shared with the
// store (they are immutable), so no copy of the state is made.
type fsmSnapshot struct {
	servers []*pbstorage.Server
	applied uint64 // the FSM's applied Raft index when it was taken

	batches chan []*pbresource.Resource
	release chan struct{}
	once    sync.Once

	// Set before batches is closed.
	index uint64
	err   error
}

const snapshotBatch = 512

var errSnapshotReleased = errors.New("snapshot released before it was persisted")

func startSnapshot(store *inmem.Store, servers []*pbstorage.Server, applied uint64) *fsmSnapshot {
	s := &fsmSnapshot{
		servers: servers,
		applied: applied,
		batches: make(chan []*pbresource.Resource, 4),
		release: make(chan struct{}),
	}
	taken := make(chan struct{})
	var takenOnce sync.Once
	markTaken := func() { takenOnce.Do(func() { close(taken) }) }
	go func() {
		defer close(s.batches)
		defer markTaken()
		batch := make([]*pbresource.Resource, 0, snapshotBatch)
		send := func() error {
			// A released snapshot stops at once: with a reader draining the
			// channel, the select below would pick either case at random.
			select {
			case <-s.release:
				return errSnapshotReleased
			default:
			}
			select {
			case s.batches <- batch:
				batch = make([]*pbresource.Resource, 0, snapshotBatch)
				return nil
			case <-s.release:
				return errSnapshotReleased
			}
		}
		idx, err := store.ForEach(func(res *pbresource.Resource) error {
			markTaken()
			batch = append(batch, res)
			if len(batch) == snapshotBatch {
				return send()
			}
			return nil
		})
		if err == nil && len(batch) > 0 {
			err = send()
		}
		s.index, s.err = idx, err
	}()
	<-taken
	return s
}

// Persist writes the stream to the sink.
func (s *fsmSnapshot) Persist(sink hraft.SnapshotSink) error {
	err := s.persist(sink)
	if err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) persist(sink hraft.SnapshotSink) error {
	sw, err := newSnapshotWriter(sink)
	if err != nil {
		return err
	}
	for batch := range s.batches {
		for _, res := range batch {
			if err := sw.resource(res); err != nil {
				s.Release() // stop the iteration
				for range s.batches {
				}
				return err
			}
		}
	}
	if s.err != nil {
		return s.err
	}
	return sw.finish(s.index, s.applied, s.servers)
}

// Release stops the iteration if Persist was not called or gave up.
func (s *fsmSnapshot) Release() {
	s.once.Do(func() { close(s.release) })
}
