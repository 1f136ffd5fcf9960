package raft

import (
	"encoding/hex"
	"errors"
	"log/slog"
	"testing"

	hraft "github.com/hashicorp/raft"

	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

// Batch entries as servers wrote them before batches had compares (the
// bytes were taken from that version): a create of test/v1/Thing a and of
// b, owned by a, and an update of a at version 1. A log written then must
// apply now exactly as it did.
const (
	oldBatchCreate = "128a010a320a280a057569642d611201611a110a0474657374120276311a055468696e6722090a0764656661756c742a060a016b1201760a540a280a057569642d621201621a110a0474657374120276311a055468696e6722090a0764656661756c7412280a057569642d611201611a110a0474657374120276311a055468696e6722090a0764656661756c74"
	oldBatchUpdate = "12370a350a280a057569642d611201611a110a0474657374120276311a055468696e6722090a0764656661756c741a01312a060a016b120176"
)

func TestOldBatchEntriesStillApply(t *testing.T) {
	f := newFSM(inmem.NewStore(), slog.New(slog.DiscardHandler), func() {})
	entry := func(idx uint64, h string) *applyResult {
		data, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		return f.Apply(&hraft.Log{Index: idx, Term: 1, Type: hraft.LogCommand, Data: data}).(*applyResult)
	}

	if r := entry(1, oldBatchCreate); r.err != nil || len(r.resources) != 2 {
		t.Fatalf("old batch create: %d resources, %v", len(r.resources), r.err)
	}
	a, err := f.store.Read(testID("a"))
	if err != nil || a.GetVersion() != "1" || a.GetMetadata()["k"] != "v" {
		t.Fatalf("a after the old create: %v, %v", a, err)
	}
	if owned, _ := f.store.ListByOwner(testID("a")); len(owned) != 1 || owned[0].GetId().GetName() != "b" {
		t.Fatalf("a owns %v after the old create, want b", owned)
	}

	if r := entry(2, oldBatchUpdate); r.err != nil {
		t.Fatalf("old batch update at the current version: %v", r.err)
	}
	if a, _ := f.store.Read(testID("a")); a.GetVersion() != "2" {
		t.Fatalf("a after the old update is at version %q, want 2", a.GetVersion())
	}
	// The same entry again is stale: refused as it always was, and as a
	// member's conflict, not a compare's.
	r := entry(3, oldBatchUpdate)
	if !errors.Is(r.err, storage.ErrBatchConflict) || errors.Is(r.err, storage.ErrCompareFailed) {
		t.Fatalf("old stale batch update: %v, want a batch conflict of its member", r.err)
	}
	if a, _ := f.store.Read(testID("a")); a.GetVersion() != "2" {
		t.Fatalf("a after the refused update is at version %q, want 2", a.GetVersion())
	}
}
