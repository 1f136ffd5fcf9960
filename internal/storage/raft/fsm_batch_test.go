package raft

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

// TestFSMBatchesApplyAsOneByOne checks the rule that lets the FSM group
// entries into one store transaction: whatever the batch boundaries, a log
// leaves the state, the results and the watch events that applying it
// entry by entry leaves. The log mixes creates, updates with fresh and
// stale versions, batches (some with a stale member or a repeated name,
// some with compares that hold or not),
// deletes (CAS, of missing resources, of another uid), registry changes,
// configuration entries, malformed and undecodable commands.
func TestFSMBatchesApplyAsOneByOne(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		one := newBatchProbe(t)
		var logs []*hraft.Log
		add := func(l *hraft.Log) {
			l.Index = uint64(len(logs) + 1)
			l.Term = 1
			logs = append(logs, l)
			one.results = append(one.results, resultString(one.f.Apply(l)))
		}
		// Index 1 changes no resource, so a watch resumed from it replays
		// every resource event.
		add(commandLog(registerCommand(Server{ID: "s1", RaftAddr: "r1", ServerAddr: "g1"})))
		steps := rapid.IntRange(1, 120).Draw(t, "steps")
		for range steps {
			add(drawLog(t, one.f.store, uint64(len(logs)+1)))
		}

		batched := newBatchProbe(t)
		for i := 0; i < len(logs); {
			n := min(rapid.IntRange(1, 24).Draw(t, "batch"), len(logs)-i)
			for _, r := range batched.f.ApplyBatch(logs[i : i+n]) {
				batched.results = append(batched.results, resultString(r))
			}
			i += n
		}

		for i := range logs {
			if one.results[i] != batched.results[i] {
				t.Fatalf("entry %d: result %s one by one, %s in batches", i+1, one.results[i], batched.results[i])
			}
		}
		if a, b := one.f.store.Index(), batched.f.store.Index(); a != b {
			t.Fatalf("store index %d one by one, %d in batches", a, b)
		}
		if a, b := stateString(t, one.f), stateString(t, batched.f); a != b {
			t.Fatalf("state one by one:\n%s\nin batches:\n%s", a, b)
		}
		if a, b := one.events(t), batched.events(t); a != b {
			t.Fatalf("events one by one:\n%s\nin batches:\n%s", a, b)
		}
	})
}

// batchProbe is an FSM on an empty store with a watch on every resource of
// testType, opened before the first entry.
type batchProbe struct {
	f       *fsm
	live    storage.Watch
	results []string
}

func newBatchProbe(t *rapid.T) *batchProbe {
	f := newFSM(inmem.NewStore(), slog.New(slog.DiscardHandler), func() {})
	w, err := f.store.WatchList(testType, &pbresource.Tenancy{Namespace: ids.WildcardNamespace}, "", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return &batchProbe{f: f, live: w}
}

// events returns the events the store replays after index 1, checking that
// the live watch delivered the same ones.
func (p *batchProbe) events(t *rapid.T) string {
	defer p.live.Close()
	replay, err := p.f.store.WatchList(testType, &pbresource.Tenancy{Namespace: ids.WildcardNamespace}, "", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Close()
	// Every event is due already; the bound turns a bug into a failure.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	next := func(w storage.Watch) *pbresource.WatchEvent {
		ev, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		return ev
	}
	if ev := next(p.live); ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
		t.Fatalf("live watch on an empty store began with %v", ev)
	}
	var out string
	for {
		ev := next(replay)
		if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			return out
		}
		s := eventString(ev)
		if live := eventString(next(p.live)); live != s {
			t.Fatalf("live watch has %s where the replay has %s", live, s)
		}
		out += s + "\n"
	}
}

func eventString(ev *pbresource.WatchEvent) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(ev.GetResource())
	return fmt.Sprintf("%s @%d %x", ev.GetOp(), ev.GetIndex(), b)
}

// stateString is every stored resource, encoded, with what each owns, and
// the server registry.
func stateString(t *rapid.T, f *fsm) string {
	var out string
	_, err := f.store.ForEach(func(res *pbresource.Resource) error {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(res)
		owned, _ := f.store.ListByOwner(res.GetId())
		out += fmt.Sprintf("%x owns %d\n", b, len(owned))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range f.serverList() {
		out += fmt.Sprintf("server %s %s %s\n", s.GetId(), s.GetRaftAddr(), s.GetServerAddr())
	}
	return out
}

func resultString(r any) string {
	if r == nil {
		return "nil"
	}
	ar := r.(*applyResult)
	out := fmt.Sprintf("err=%v", ar.err)
	for _, res := range ar.resources {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(res)
		out += fmt.Sprintf(" %x", b)
	}
	return out
}

func commandLog(cmd *pbstorage.Command) *hraft.Log {
	data, err := proto.Marshal(cmd)
	if err != nil {
		panic(err)
	}
	return &hraft.Log{Type: hraft.LogCommand, Data: data}
}

var (
	batchNames = []string{"a", "b", "c", "d"}
	batchUIDs  = []string{"u1", "u2"}
)

// drawLog draws the entry at idx, reading the state it applies to (store)
// so that CAS versions are often fresh.
func drawLog(t *rapid.T, store *inmem.Store, idx uint64) *hraft.Log {
	id := func(label string) *pbresource.ID {
		return &pbresource.ID{
			Type:    testType,
			Tenancy: &pbresource.Tenancy{Namespace: "default"},
			Name:    rapid.SampledFrom(batchNames).Draw(t, label+"name"),
			Uid:     rapid.SampledFrom(batchUIDs).Draw(t, label+"uid"),
		}
	}
	// version is empty (a create), the current one, or another.
	version := func(label string, id *pbresource.ID) string {
		switch rapid.IntRange(0, 2).Draw(t, label+"version") {
		case 0:
			return ""
		case 1:
			if cur, err := store.Read(&pbresource.ID{Type: id.Type, Tenancy: id.Tenancy, Name: id.Name}); err == nil {
				return cur.GetVersion()
			}
		}
		return strconv.FormatUint(rapid.Uint64Range(1, idx).Draw(t, label+"stale"), 10)
	}
	resource := func(label string) *pbresource.Resource {
		res := &pbresource.Resource{Id: id(label)}
		res.Version = version(label, res.Id)
		res.Metadata = map[string]string{"text": rapid.StringMatching(`[a-z]{0,3}`).Draw(t, label+"text")}
		if rapid.Bool().Draw(t, label+"owned") {
			res.Owner = id(label + "owner")
		}
		return res
	}
	switch rapid.IntRange(0, 9).Draw(t, "kind") {
	case 0, 1, 2:
		return commandLog(writeCommand(resource("")))
	case 3, 4:
		n := rapid.IntRange(1, 4).Draw(t, "members")
		members := make([]*pbresource.Resource, n)
		for i := range members {
			members[i] = resource(fmt.Sprint("m", i))
		}
		// Compares see the state the group's earlier entries left.
		compares := make([]*pbresource.Compare, rapid.IntRange(0, 2).Draw(t, "compares"))
		for i := range compares {
			label := fmt.Sprint("c", i)
			c := &pbresource.Compare{Op: pbresource.Compare_Op(rapid.IntRange(1, 4).Draw(t, label+"op")), Id: id(label)}
			switch c.Op {
			case pbresource.Compare_OP_VERSION:
				c.Version = version(label, c.Id)
			case pbresource.Compare_OP_NOTHING_NEWER:
				c.Id.Name, c.Id.Uid = rapid.SampledFrom([]string{"", "a", "b"}).Draw(t, label+"prefix"), ""
				c.Version = strconv.FormatUint(rapid.Uint64Range(0, idx).Draw(t, label+"since"), 10)
			}
			if rapid.Bool().Draw(t, label+"anyuid") {
				c.Id.Uid = ""
			}
			compares[i] = c
		}
		return commandLog(writeBatchCommand(members, compares))
	case 5, 6:
		i := id("")
		if rapid.Bool().Draw(t, "anyuid") {
			i.Uid = ""
		}
		return commandLog(deleteCommand(i, version("", i)))
	case 7:
		if rapid.Bool().Draw(t, "deregister") {
			return commandLog(deregisterCommand("s" + rapid.SampledFrom([]string{"1", "2"}).Draw(t, "server")))
		}
		s := rapid.SampledFrom([]string{"1", "2"}).Draw(t, "server")
		return commandLog(registerCommand(Server{ID: "s" + s, RaftAddr: "r" + s, ServerAddr: fmt.Sprint("g", idx)}))
	case 8:
		switch rapid.IntRange(0, 2).Draw(t, "bad") {
		case 0:
			return commandLog(&pbstorage.Command{})
		case 1:
			return commandLog(writeCommand(&pbresource.Resource{Id: &pbresource.ID{Type: testType}}))
		}
		return &hraft.Log{Type: hraft.LogCommand, Data: []byte{0xff}}
	}
	return &hraft.Log{Type: hraft.LogConfiguration, Data: []byte("configuration")}
}
