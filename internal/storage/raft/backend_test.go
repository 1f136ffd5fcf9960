package raft

import (
	"errors"
	"testing"

	"trellis.dev/trellis/internal/storage"
)

func TestSingleServer(t *testing.T) {
	nodes := startCluster(t, 1, false, testTuning())
	b := nodes[0].b
	ctx := ctxT(t)
	got := mustWrite(t, b, testResource("a"))
	if got.GetVersion() == "" {
		t.Fatalf("no version on %v", got)
	}
	if _, err := b.WriteCAS(ctx, testResource("a")); !errors.Is(err, storage.ErrCASFailure) {
		t.Fatalf("create over existing: got %v, want ErrCASFailure", err)
	}
	r, err := b.Read(ctx, storage.StrongConsistency, testID("a"))
	if err != nil || r.GetVersion() != got.GetVersion() {
		t.Fatalf("strong read: %v %v", r, err)
	}
	if err := b.DeleteCAS(ctx, testID("a"), got.GetVersion()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(ctx, storage.StrongConsistency, testID("a")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("read after delete: %v", err)
	}
}
