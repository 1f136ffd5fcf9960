package raft

import (
	"fmt"
	"log/slog"
	"testing"

	hraft "github.com/hashicorp/raft"
)

// openDiskLogs opens the on-disk stores under dir the way a server does,
// and returns the backend that owns them (to close) and the log store.
func openDiskLogs(t *testing.T, dir string) (*Backend, hraft.LogStore) {
	t.Helper()
	b := &Backend{cfg: Config{DataDir: dir}, tuning: DefaultTuning(), logger: slog.New(slog.DiscardHandler)}
	logs, _, _, err := b.openStores()
	if err != nil {
		t.Fatalf("opening the stores in %s: %v", dir, err)
	}
	return b, logs
}

func logEntry(index, term uint64) *hraft.Log {
	return &hraft.Log{Index: index, Term: term, Type: hraft.LogCommand, Data: []byte(fmt.Sprintf("entry %d of term %d", index, term))}
}

// A follower that meets a new leader drops the uncommitted tail of its log
// (raft's "clearing log suffix") and appends the leader's entries. A
// restart after that must read every entry back: the log store once marked
// the truncated segment sealed without writing its index, and the restarted
// server panicked in NewRaft ("sealed segment has no index block").
func TestLogReadsBackAfterSuffixTruncationAndRestart(t *testing.T) {
	dir := t.TempDir()
	b, logs := openDiskLogs(t, dir)
	for i := uint64(1); i <= 10; i++ {
		if err := logs.StoreLog(logEntry(i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := logs.DeleteRange(9, 10); err != nil {
		t.Fatalf("clearing the suffix: %v", err)
	}
	for i := uint64(9); i <= 12; i++ {
		if err := logs.StoreLog(logEntry(i, 2)); err != nil {
			t.Fatal(err)
		}
	}
	b.closeStores()

	b, logs = openDiskLogs(t, dir)
	defer b.closeStores()
	if first, err := logs.FirstIndex(); err != nil || first != 1 {
		t.Fatalf("FirstIndex = %d, %v; want 1", first, err)
	}
	if last, err := logs.LastIndex(); err != nil || last != 12 {
		t.Fatalf("LastIndex = %d, %v; want 12", last, err)
	}
	for i := uint64(1); i <= 12; i++ {
		var got hraft.Log
		if err := logs.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog(%d) after restart: %v", i, err)
		}
		want := uint64(1)
		if i >= 9 {
			want = 2
		}
		if got.Term != want || string(got.Data) != string(logEntry(i, want).Data) {
			t.Fatalf("entry %d = term %d %q; want term %d", i, got.Term, got.Data, want)
		}
	}
}
