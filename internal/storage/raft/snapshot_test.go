package raft

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

func encodeSnapshot(t testing.TB, resources []*pbresource.Resource, index uint64, servers []*pbstorage.Server) []byte {
	t.Helper()
	var buf bytes.Buffer
	sw, err := newSnapshotWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources {
		if err := sw.resource(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := sw.finish(index, 0, servers); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSnapshotCodecRoundTrip(t *testing.T) {
	var in []*pbresource.Resource
	for i := range 1000 {
		r := testResource(fmt.Sprintf("r%04d", i))
		r.Version = strconv.Itoa(i + 1)
		in = append(in, r)
	}
	servers := []*pbstorage.Server{{Id: "s1", RaftAddr: "127.0.0.1:1", ServerAddr: "127.0.0.1:2"}}
	data := encodeSnapshot(t, in, 1234, servers)
	var out []*pbresource.Resource
	tr, err := readSnapshot(bytes.NewReader(data), func(r *pbresource.Resource) error { out = append(out, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if tr.GetIndex() != 1234 || tr.GetResources() != 1000 || !proto.Equal(tr.GetServers()[0], servers[0]) {
		t.Fatalf("trailer %v", tr)
	}
	if len(out) != len(in) {
		t.Fatalf("%d resources back, want %d", len(out), len(in))
	}
	for i := range in {
		if !proto.Equal(in[i], out[i]) {
			t.Fatalf("resource %d: %v != %v", i, out[i], in[i])
		}
	}
}

func TestSnapshotCodecRefusesDamage(t *testing.T) {
	good := encodeSnapshot(t, []*pbresource.Resource{testResource("a"), testResource("b")}, 7, nil)
	badFormat := func() []byte {
		var buf bytes.Buffer
		sw, _ := newSnapshotWriter(io.Discard)
		_ = sw
		b, _ := proto.Marshal(&pbstorage.SnapshotHeader{Format: 99})
		buf.Write(protowireLen(len(b)))
		buf.Write(b)
		return buf.Bytes()
	}()
	wrongCount := func() []byte {
		var buf bytes.Buffer
		sw, _ := newSnapshotWriter(&buf)
		_ = sw.resource(testResource("a"))
		sw.count = 5
		_ = sw.finish(1, 0, nil)
		return buf.Bytes()
	}()
	noID := encodeSnapshot(t, []*pbresource.Resource{{Version: "1"}}, 1, nil)
	cases := map[string][]byte{
		"empty":            nil,
		"truncated":        good[:len(good)-3],
		"no trailer":       good[:len(good)-len(trailerBytes(t, 7, 2))],
		"trailing garbage": append(append([]byte(nil), good...), 0x01),
		"flipped length":   append([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, good...),
		"unknown format":   badFormat,
		"count mismatch":   wrongCount,
		"resource w/o id":  noID,
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := readSnapshot(bytes.NewReader(data), func(*pbresource.Resource) error { return nil })
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("got %v, want ErrBadSnapshot", err)
			}
		})
	}
}

func protowireLen(n int) []byte {
	var out []byte
	for n >= 0x80 {
		out = append(out, byte(n)|0x80)
		n >>= 7
	}
	return append(out, byte(n))
}

func trailerBytes(t testing.TB, index, count uint64) []byte {
	b, err := proto.Marshal(&pbstorage.SnapshotRecord{Record: &pbstorage.SnapshotRecord_Trailer{Trailer: &pbstorage.SnapshotTrailer{Index: index, Resources: count}}})
	if err != nil {
		t.Fatal(err)
	}
	return append(protowireLen(len(b)), b...)
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct {
	bytes.Buffer
	cancelled, closed bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { s.closed = true; return nil }

// TestFSMSnapshotIsAtItsIndex takes an FSM snapshot, applies more entries
// before persisting it (as raft may), and checks that the snapshot holds
// the state at the moment it was taken, which a fresh FSM restores.
func TestFSMSnapshotIsAtItsIndex(t *testing.T) {
	f := newFSM(inmem.NewStore(), testLogger(t), func() {})
	apply := func(idx uint64, cmd *pbstorage.Command) *applyResult {
		data, err := proto.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		return f.Apply(&hraft.Log{Index: idx, Type: hraft.LogCommand, Data: data}).(*applyResult)
	}
	for i := range 1500 {
		if r := apply(uint64(i+1), writeCommand(testResource(fmt.Sprintf("r%04d", i)))); r.err != nil {
			t.Fatal(r.err)
		}
	}
	apply(1501, registerCommand(Server{ID: "s1", RaftAddr: "a:1", ServerAddr: "a:2"}))
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Changes after the snapshot was taken must not leak into it.
	apply(1502, writeCommand(testResource("late")))
	apply(1503, deleteCommand(testID("r0000"), ""))
	apply(1504, registerCommand(Server{ID: "s2", RaftAddr: "b:1", ServerAddr: "b:2"}))
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !sink.closed || sink.cancelled {
		t.Fatalf("sink closed=%v cancelled=%v", sink.closed, sink.cancelled)
	}

	g := newFSM(inmem.NewStore(), testLogger(t), func() {})
	if err := g.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	if g.store.Index() != 1500 {
		t.Fatalf("restored index %d, want 1500", g.store.Index())
	}
	all, _ := g.store.List(testType, &pbresource.Tenancy{Namespace: "default"}, "")
	if len(all) != 1500 {
		t.Fatalf("restored %d resources, want 1500", len(all))
	}
	if _, err := g.store.Read(testID("late")); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a later write leaked into the snapshot: %v", err)
	}
	if _, err := g.store.Read(testID("r0000")); err != nil {
		t.Fatalf("a later delete leaked into the snapshot: %v", err)
	}
	if _, ok := g.server("s1"); !ok {
		t.Fatal("registry not restored")
	}
	if _, ok := g.server("s2"); ok {
		t.Fatal("a later registration leaked into the snapshot")
	}
}

// TestFSMSnapshotReleasedUnpersisted: raft may drop a snapshot without
// persisting it; the iteration must not be left hanging.
func TestFSMSnapshotReleasedUnpersisted(t *testing.T) {
	f := newFSM(inmem.NewStore(), testLogger(t), func() {})
	for i := range 5000 {
		if _, err := f.store.WriteCAS(uint64(i+1), testResource(fmt.Sprintf("r%05d", i))); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	s := snap.(*fsmSnapshot)
	snap.Release()
	for range s.batches { // ends only when the iteration stopped
	}
	if !errors.Is(s.err, errSnapshotReleased) {
		t.Fatalf("iteration ended with %v", s.err)
	}
}

// TestFSMDeterminism applies the same log to two state machines and checks
// they hold the same resources with the same versions, and the same
// results, including refusals.
func TestFSMDeterminism(t *testing.T) {
	var log []*hraft.Log
	add := func(cmd *pbstorage.Command) {
		data, _ := proto.Marshal(cmd)
		log = append(log, &hraft.Log{Index: uint64(len(log) + 1), Type: hraft.LogCommand, Data: data})
	}
	add(writeCommand(testResource("a")))
	add(writeCommand(testResource("a"))) // refused: exists
	add(writeBatchCommand([]*pbresource.Resource{testResource("b"), testResource("c")}, nil))
	upd := testResource("b")
	upd.Version = "3"
	add(writeCommand(upd))
	add(deleteCommand(testID("c"), "1")) // refused: stale
	add(deleteCommand(testID("a"), ""))
	add(&pbstorage.Command{})                                                                              // invalid, skipped
	log = append(log, &hraft.Log{Index: uint64(len(log) + 1), Type: hraft.LogCommand, Data: []byte{0xff}}) // undecodable
	log = append(log, &hraft.Log{Index: uint64(len(log) + 1), Type: hraft.LogNoop})

	run := func() (*fsm, []string) {
		f := newFSM(inmem.NewStore(), testLogger(t), func() {})
		var results []string
		for _, l := range log {
			r, _ := f.Apply(l).(*applyResult)
			if r == nil {
				results = append(results, "nil")
				continue
			}
			results = append(results, fmt.Sprint(len(r.resources), r.err))
		}
		return f, results
	}
	f1, r1 := run()
	f2, r2 := run()
	if fmt.Sprint(r1) != fmt.Sprint(r2) {
		t.Fatalf("results differ:\n%v\n%v", r1, r2)
	}
	l1, _ := f1.store.List(testType, &pbresource.Tenancy{Namespace: "*"}, "")
	l2, _ := f2.store.List(testType, &pbresource.Tenancy{Namespace: "*"}, "")
	if len(l1) != 2 || len(l1) != len(l2) {
		t.Fatalf("states differ or wrong: %v / %v", l1, l2)
	}
	for i := range l1 {
		if !proto.Equal(l1[i], l2[i]) {
			t.Fatalf("state differs at %d: %v / %v", i, l1[i], l2[i])
		}
	}
	if l1[0].GetId().GetName() != "b" || l1[0].GetVersion() != "4" || l1[1].GetVersion() != "3" {
		t.Fatalf("unexpected state %v", l1)
	}
}

// TestRaftSnapshotsAndRestart lets raft snapshot on its own (low
// threshold), restarts a server (it restores its snapshot and replays the
// rest of its log), and brings back a server that fell so far behind that
// the leader must send it a snapshot.
func TestRaftSnapshotsAndRestart(t *testing.T) {
	tuning := testTuning()
	tuning.SnapshotThreshold = 32
	tuning.TrailingLogs = 8
	tuning.SnapshotInterval = 50 * time.Millisecond
	nodes := startCluster(t, 3, true, tuning)
	leader := leaderOf(t, nodes)
	ctx := ctxT(t)
	write := func(prefix string, n int) {
		for i := 0; i < n; i += 10 {
			var batch []*pbresource.Resource
			for j := i; j < i+10 && j < n; j++ {
				batch = append(batch, testResource(fmt.Sprintf("%s-%03d", prefix, j)))
			}
			if _, err := nodes[i/10%3].b.WriteBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
		// Single writes too, so that the log grows past the threshold.
		for i := range 40 {
			mustWrite(t, nodes[i%3].b, testResource(fmt.Sprintf("%s-single-%02d", prefix, i)))
		}
	}
	write("one", 200)
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.id+" takes a snapshot", func() bool {
			idx, _ := strconv.ParseUint(n.b.raft.Stats()["last_snapshot_index"], 10, 64)
			return idx > 0
		})
	}

	var fi []int
	for i, n := range nodes {
		if n != leader {
			fi = append(fi, i)
		}
	}
	// Restart one follower: it comes back from its snapshot and log.
	nodes[fi[0]] = nodes[fi[0]].restart()
	restarted := nodes[fi[0]]
	// Stop the other and write on (not through it), past the trailing logs
	// it would need.
	lagging := nodes[fi[1]]
	lagging.stop()
	nodes[fi[1]] = restarted
	write("two", 100)
	lag := lagging.restart()
	nodes[fi[1]] = lag
	want, err := leader.b.List(ctx, storage.StrongConsistency, testType, &pbresource.Tenancy{Namespace: "*"}, "")
	if err != nil || len(want) != 380 {
		t.Fatalf("leader has %d resources (%v), want 380", len(want), err)
	}
	for _, n := range []*node{restarted, lag} {
		eventually(t, 20*time.Second, n.id+" has every resource", func() bool {
			got, _ := n.b.List(ctx, storage.EventualConsistency, testType, &pbresource.Tenancy{Namespace: "*"}, "")
			if len(got) != len(want) {
				return false
			}
			for i := range got {
				if !proto.Equal(got[i], want[i]) {
					return false
				}
			}
			return true
		})
	}
	// The restarted servers serve forwarded writes again.
	waitReady(t, restarted, lag)
	mustWrite(t, lag.b, testResource("after"))
}

// TestUserSnapshotRestore saves the state through one follower, changes
// it, restores through another follower, and checks that every server has
// the saved state back, that watches were told to re-list, and that writes
// continue with versions past the restore.
func TestUserSnapshotRestore(t *testing.T) {
	nodes := startCluster(t, 3, true, testTuning())
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)
	ctx := ctxT(t)
	for i := range 20 {
		mustWrite(t, nodes[i%3].b, testResource(fmt.Sprintf("keep-%02d", i)))
	}
	var file bytes.Buffer
	if err := f[0].b.Snapshot(ctx, &file); err != nil {
		t.Fatal(err)
	}
	saved, _ := leader.b.List(ctx, storage.StrongConsistency, testType, &pbresource.Tenancy{Namespace: "*"}, "")

	// Change the state after the save.
	if err := leader.b.DeleteCAS(ctx, testID("keep-00"), ""); err != nil {
		t.Fatal(err)
	}
	last := mustWrite(t, leader.b, testResource("later"))

	// A bad file is refused and changes nothing.
	for name, bad := range map[string][]byte{
		"not gzip":  []byte("hello"),
		"truncated": file.Bytes()[:file.Len()/2],
		"bad magic": gzipped(t, []byte("NOT-A-SNAPSHOT\n")),
	} {
		if err := f[1].b.Restore(ctx, bytes.NewReader(bad)); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("restore of a %s file: %v, want ErrBadSnapshot", name, err)
		}
	}
	if _, err := leader.b.Read(ctx, storage.StrongConsistency, testID("later")); err != nil {
		t.Fatalf("a refused restore changed the state: %v", err)
	}

	watches := map[*node]storage.Watch{}
	for _, n := range nodes {
		w, err := n.b.WatchList(ctx, testType, &pbresource.Tenancy{Namespace: "*"}, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		watches[n] = w
	}

	if err := f[1].b.Restore(ctx, bytes.NewReader(file.Bytes())); err != nil {
		t.Fatal(err)
	}
	lastIndex, _ := strconv.ParseUint(last.GetVersion(), 10, 64)
	for _, n := range nodes {
		eventually(t, 20*time.Second, n.id+" has the saved state", func() bool {
			got, _ := n.b.List(ctx, storage.EventualConsistency, testType, &pbresource.Tenancy{Namespace: "*"}, "")
			if len(got) != len(saved) {
				return false
			}
			for i := range got {
				if !proto.Equal(got[i], saved[i]) {
					return false
				}
			}
			return n.b.store.Index() > lastIndex
		})
		w := watches[n]
		for {
			_, err := w.Next(ctx)
			if err == nil {
				continue
			}
			if !errors.Is(err, storage.ErrIndexTooOld) {
				t.Fatalf("watch on %s ended with %v, want ErrIndexTooOld", n.id, err)
			}
			break
		}
		// No watch can resume across the restore.
		if _, err := n.b.WatchList(ctx, testType, &pbresource.Tenancy{Namespace: "*"}, "", lastIndex); !errors.Is(err, storage.ErrIndexTooOld) {
			t.Fatalf("resume across the restore on %s: %v", n.id, err)
		}
	}
	after := mustWrite(t, f[0].b, testResource("after-restore"))
	if v, _ := strconv.ParseUint(after.GetVersion(), 10, 64); v <= lastIndex {
		t.Fatalf("version %d after the restore is not past %d", v, lastIndex)
	}
	// The server registry survived: forwarding still works everywhere.
	for _, n := range nodes {
		if _, err := n.b.Read(ctx, storage.StrongConsistency, testID("after-restore")); err != nil {
			t.Fatalf("strong read on %s after restore: %v", n.id, err)
		}
	}
}

func gzipped(t testing.TB, data []byte) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if _, err := gz.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
