package inmem

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// A change that fails halfway through its inserts (which a resource with
// an id cannot do) makes the group redo its earlier changes in a new
// transaction; the group must end as if nothing had happened.
func TestTxRedoKeepsEarlierChanges(t *testing.T) {
	run := func(redo bool) string {
		s := NewStore()
		if _, err := s.WriteBatch(1, []*pbresource.Resource{newRes("default", "a", "u1"), newRes("default", "b", "u1")}); err != nil {
			t.Fatal(err)
		}
		w, err := s.WatchList(testTyp, &pbresource.Tenancy{Namespace: ids.WildcardNamespace}, "", 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		s.Update(func(tx *Tx) {
			upd := newRes("default", "a", "u1")
			upd.Version = "1"
			if _, err := tx.WriteCAS(2, upd); err != nil {
				t.Fatal(err)
			}
			if err := tx.DeleteCAS(3, testID("default", "b"), ""); err != nil {
				t.Fatal(err)
			}
			if redo {
				tx.redo()
			}
			if _, err := tx.WriteCAS(4, newRes("default", "c", "u1")); err != nil {
				t.Fatal(err)
			}
		})
		var out string
		_, err = s.ForEach(func(res *pbresource.Resource) error {
			b, err := proto.Marshal(res)
			out += fmt.Sprintf("%x\n", b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for {
			ev := mustNext(t, w)
			if ev.GetOp() == pbresource.WatchEvent_OP_END_OF_SNAPSHOT {
				break
			}
			out += evString(ev) + "\n"
		}
		return out + fmt.Sprint("index ", s.Index())
	}
	if plain, redone := run(false), run(true); plain != redone {
		t.Fatalf("without redo:\n%s\nwith redo:\n%s", plain, redone)
	}
}
