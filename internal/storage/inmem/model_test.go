package inmem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

// model is the storage contract over a plain map, plus inmem's own rule
// that a change's version is its index and the index counts changes.
type model struct {
	index  uint64
	state  map[string]modelEntry // by name
	events []modelEvent
}

type modelEntry struct{ uid, version, text string }

type modelEvent struct {
	op    pbresource.WatchEvent_Op
	name  string
	entry modelEntry
	index uint64
}

// checkWrite is WriteCAS's rule.
func (m *model) checkWrite(name, uid, version string) error {
	cur, ok := m.state[name]
	switch {
	case !ok && version != "":
		return storage.ErrCASFailure
	case !ok:
		return nil
	case version == "":
		return storage.ErrCASFailure
	case uid != cur.uid:
		return storage.ErrWrongUID
	case version != cur.version:
		return storage.ErrCASFailure
	}
	return nil
}

type member struct{ name, uid, version, text string }

var (
	modelNames = []string{"a", "b", "c"}
	modelUIDs  = []string{"u1", "u2"}
)

func drawMember(t *rapid.T, m *model, step int) member {
	name := rapid.SampledFrom(modelNames).Draw(t, "name")
	return member{
		name:    name,
		uid:     rapid.SampledFrom(modelUIDs).Draw(t, "uid"),
		version: drawVersion(t, m, name),
		text:    fmt.Sprint("step ", step),
	}
}

func drawVersion(t *rapid.T, m *model, name string) string {
	switch rapid.SampledFrom([]string{"current", "empty", "earlier", "bogus"}).Draw(t, "version") {
	case "current":
		return m.state[name].version
	case "earlier":
		if m.index == 0 {
			return "0"
		}
		return strconv.FormatUint(rapid.Uint64Range(1, m.index).Draw(t, "earlier"), 10)
	case "bogus":
		return "bogus"
	}
	return ""
}

func (mb member) resource() *pbresource.Resource {
	res := newRes("default", mb.name, mb.uid)
	res.Version = mb.version
	res.Metadata = map[string]string{"text": mb.text}
	return res
}

// sameError reports whether got is want (nil or a sentinel).
func sameError(got, want error) bool {
	if want == nil {
		return got == nil
	}
	return errors.Is(got, want)
}

// TestModel runs random writes, deletes and batches against a Backend and
// the model side by side, then checks that a watch saw the model's history
// and that resuming anywhere in it replays the rest.
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		b := NewBackend()
		m := &model{state: map[string]modelEntry{}}
		w, err := b.WatchList(ctx, testTyp, wildcard, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		step := 0

		apply := func(mb member, version string) modelEntry {
			e := modelEntry{uid: mb.uid, version: version, text: mb.text}
			m.state[mb.name] = e
			m.events = append(m.events, modelEvent{pbresource.WatchEvent_OP_UPSERT, mb.name, e, m.index})
			return e
		}

		t.Repeat(map[string]func(*rapid.T){
			"write": func(t *rapid.T) {
				step++
				mb := drawMember(t, m, step)
				want := m.checkWrite(mb.name, mb.uid, mb.version)
				got, err := b.WriteCAS(ctx, mb.resource())
				if !sameError(err, want) {
					t.Fatalf("WriteCAS(%+v) = %v, want %v", mb, err, want)
				}
				if err != nil {
					return
				}
				m.index++
				e := apply(mb, strconv.FormatUint(m.index, 10))
				if got.GetVersion() != e.version {
					t.Fatalf("WriteCAS(%+v) got version %q, want %q", mb, got.GetVersion(), e.version)
				}
			},
			"delete": func(t *rapid.T) {
				name := rapid.SampledFrom(modelNames).Draw(t, "name")
				uid := rapid.SampledFrom(append([]string{""}, modelUIDs...)).Draw(t, "uid")
				version := drawVersion(t, m, name)
				cur, ok := m.state[name]
				var want error
				deletes := ok && (uid == "" || uid == cur.uid)
				if deletes && version != "" && version != cur.version {
					want, deletes = storage.ErrCASFailure, false
				}
				i := testID("default", name)
				i.Uid = uid
				if err := b.DeleteCAS(ctx, i, version); !sameError(err, want) {
					t.Fatalf("DeleteCAS(%s, uid %q, version %q) = %v, want %v", name, uid, version, err, want)
				}
				if deletes {
					m.index++
					delete(m.state, name)
					m.events = append(m.events, modelEvent{pbresource.WatchEvent_OP_DELETE, name, cur, m.index})
				}
			},
			"batch": func(t *rapid.T) {
				step++
				n := rapid.IntRange(1, 3).Draw(t, "members")
				var mbs []member
				var resources []*pbresource.Resource
				seen := map[string]bool{}
				var want error
				for range n {
					mb := drawMember(t, m, step)
					mbs = append(mbs, mb)
					resources = append(resources, mb.resource())
					switch {
					case want != nil:
					case seen[mb.name]:
						want = storage.ErrBatchConflict
					default:
						if cause := m.checkWrite(mb.name, mb.uid, mb.version); cause != nil {
							want = errors.Join(storage.ErrBatchConflict, cause)
						}
					}
					seen[mb.name] = true
				}
				// A duplicate anywhere refuses the batch, whatever else fails.
				if len(seen) < n {
					want = storage.ErrBatchConflict
				}
				got, err := b.WriteBatch(ctx, resources)
				if want != nil {
					if err == nil {
						t.Fatalf("WriteBatch(%+v) succeeded, want %v", mbs, want)
					}
					for _, target := range unwrapJoin(want) {
						if !errors.Is(err, target) {
							t.Fatalf("WriteBatch(%+v) = %v, want it to wrap %v", mbs, err, target)
						}
					}
					return
				}
				if err != nil {
					t.Fatalf("WriteBatch(%+v) = %v, want success", mbs, err)
				}
				m.index++
				for i, mb := range mbs {
					e := apply(mb, strconv.FormatUint(m.index, 10))
					if got[i].GetVersion() != e.version {
						t.Fatalf("batch member %d got version %q, want %q", i, got[i].GetVersion(), e.version)
					}
				}
			},
			"": func(t *rapid.T) {
				if got := b.Store().Index(); got != m.index {
					t.Fatalf("store index %d, model %d", got, m.index)
				}
				list, err := b.List(ctx, storage.EventualConsistency, testTyp, wildcard, "")
				if err != nil {
					t.Fatal(err)
				}
				if len(list) != len(m.state) {
					t.Fatalf("List holds %d resources, model %d", len(list), len(m.state))
				}
				for _, name := range modelNames {
					res, err := b.Read(ctx, storage.StrongConsistency, testID("default", name))
					e, ok := m.state[name]
					if !ok {
						if !errors.Is(err, storage.ErrNotFound) {
							t.Fatalf("Read(%s) = %v, %v; model has nothing", name, res, err)
						}
						continue
					}
					if err != nil || entryOf(res) != e {
						t.Fatalf("Read(%s) = %+v, %v; model %+v", name, entryOf(res), err, e)
					}
				}
			},
		})

		// The watch saw exactly the model's history.
		w.Close()
		if ev, err := w.Next(ctx); err != nil || ev.GetOp() != pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			t.Fatalf("first event of a watch on an empty store: %v, %v", ev, err)
		}
		checkHistory(t, w, m.events, "the watch from the start")

		// Resuming after any index replays the rest of the history.
		if m.index > 0 {
			since := rapid.Uint64Range(1, m.index).Draw(t, "since")
			r, err := b.WatchList(ctx, testTyp, wildcard, "", since)
			if err != nil {
				t.Fatalf("WatchList(since %d): %v", since, err)
			}
			var rest []modelEvent
			for _, ev := range m.events {
				if ev.index > since {
					rest = append(rest, ev)
				}
			}
			r.Close()
			checkHistory(t, r, rest, fmt.Sprintf("the watch resumed after %d", since))
		}
	})
}

// checkHistory reads a closed watch to its end and compares it with want;
// an END_OF_SNAPSHOT after the history is skipped.
func checkHistory(t *rapid.T, w storage.Watch, want []modelEvent, who string) {
	var got []modelEvent
	for {
		ev, err := w.Next(context.Background())
		if err != nil {
			break
		}
		if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
			continue
		}
		got = append(got, modelEvent{ev.GetOp(), ev.GetResource().GetId().GetName(), entryOf(ev.GetResource()), ev.GetIndex()})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s saw\n %v\nwant\n %v", who, got, want)
	}
}

func entryOf(res *pbresource.Resource) modelEntry {
	return modelEntry{uid: res.GetId().GetUid(), version: res.GetVersion(), text: res.GetMetadata()["text"]}
}

func unwrapJoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
