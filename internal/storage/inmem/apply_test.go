package inmem

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

// WriteBatch stores copies; ApplyBatch stores what it is handed. Both
// follow the same CAS rules.
func TestApplyBatchStoresWhatItIsHanded(t *testing.T) {
	s := NewStore()
	kept := newRes("default", "kept", "u1")
	if _, err := s.WriteBatch(1, []*pbresource.Resource{kept}); err != nil {
		t.Fatal(err)
	}
	if kept.GetVersion() != "" {
		t.Fatalf("WriteBatch changed the caller's resource: version %q", kept.GetVersion())
	}
	handed := newRes("default", "handed", "u2")
	out, err := s.ApplyBatch(2, []*pbresource.Resource{handed})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(testID("default", "handed"))
	if err != nil {
		t.Fatal(err)
	}
	if got != handed || out[0] != handed || handed.GetVersion() != "2" {
		t.Fatalf("ApplyBatch stored a copy or no version: stored %p handed %p version %q", got, handed, handed.GetVersion())
	}
	if _, err := s.ApplyCAS(3, newRes("default", "handed", "u2")); !errors.Is(err, storage.ErrCASFailure) {
		t.Fatalf("ApplyCAS over an existing resource without a version = %v, want ErrCASFailure", err)
	}
}

// Stored resources of one type share one Type and one type URL.
func TestStoredResourcesShareTheirType(t *testing.T) {
	s := NewStore()
	a, b := newRes("default", "a", "u1"), newRes("default", "b", "u2")
	a.Data = &anypb.Any{TypeUrl: "type.googleapis.com/x.Y"}
	b.Data = &anypb.Any{TypeUrl: "type.googleapis.com/x.Y"}
	if _, err := s.ApplyBatch(1, []*pbresource.Resource{a}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteBatch(2, []*pbresource.Resource{b}); err != nil {
		t.Fatal(err)
	}
	ra, _ := s.Read(testID("default", "a"))
	rb, _ := s.Read(testID("default", "b"))
	if ra.GetId().GetType() != rb.GetId().GetType() {
		t.Fatal("two stored resources of one type hold distinct Type messages")
	}
	if unsafe.StringData(ra.GetData().GetTypeUrl()) != unsafe.StringData(rb.GetData().GetTypeUrl()) {
		t.Fatal("two stored resources of one type hold distinct type URL strings")
	}
}

// A stored resource's name is a view into its id-index key, which the
// index keeps, rather than a second copy; the index is handed the key the
// write built. WriteBatch leaves the caller's name alone.
func TestStoredNameIsItsIndexKey(t *testing.T) {
	res := newRes("ns", "some-name", "u1")
	key := nameKey(res.GetId())
	shareName(res, key)
	if res.GetId().GetName() != "some-name" || unsafe.StringData(res.GetId().GetName()) != &key[len(key)-1-len("some-name")] {
		t.Fatalf("shareName: name %q is not a view into its key %q", res.GetId().GetName(), key)
	}
	ix := idIndexer{next: &nextKey{res: res, key: key}}
	if _, got, _ := ix.FromObject(res); unsafe.SliceData(got) != unsafe.SliceData(key) {
		t.Fatal("the id indexer built a new key for the resource it was handed one for")
	}
	if _, got, _ := ix.FromObject(newRes("ns", "some-name", "u1")); unsafe.SliceData(got) == unsafe.SliceData(key) || string(got) != string(key) {
		t.Fatal("the id indexer gave another resource the handed key")
	}

	s := NewStore()
	kept := newRes("ns", "kept", "u1")
	name := kept.GetId().GetName()
	out, err := s.WriteBatch(1, []*pbresource.Resource{kept, newRes("ns", "other", "u2")})
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(kept.GetId().GetName()) != unsafe.StringData(name) {
		t.Fatal("WriteBatch changed the caller's name")
	}
	if got := out[0].GetId().GetName(); got != "kept" || unsafe.StringData(got) == unsafe.StringData(name) {
		t.Fatalf("stored name %q shares the caller's bytes", got)
	}
	if err := s.DeleteCAS(2, testID("ns", "kept"), ""); err != nil {
		t.Fatal(err)
	}
	if list, _ := s.List(testTyp, &pbresource.Tenancy{Namespace: "ns"}, ""); len(list) != 1 || list[0].GetId().GetName() != "other" {
		t.Fatalf("after deleting kept, List = %v, want only other", list)
	}
}

// A batch looks its members up without reading through its write
// transaction, which would drop the transaction's cache of copied tree
// nodes and copy each member's whole path again (about 39 allocations per
// member of these batches instead of about 11).
func TestApplyBatchKeepsItsCopiedNodes(t *testing.T) {
	s := NewStore()
	batch := func(i int) []*pbresource.Resource {
		rs := make([]*pbresource.Resource, 100)
		for j := range rs {
			rs[j] = newRes("default", fmt.Sprintf("r-%d-%d", i, j), "u")
		}
		return rs
	}
	next := 1
	if _, err := s.ApplyBatch(uint64(next), batch(next)); err != nil {
		t.Fatal(err)
	}
	// Build each batch outside the count.
	batches := make([][]*pbresource.Resource, 12)
	for i := range batches {
		batches[i] = batch(i + 2)
	}
	perMember := testing.AllocsPerRun(10, func() {
		next++
		if _, err := s.ApplyBatch(uint64(next), batches[next-2]); err != nil {
			t.Fatal(err)
		}
	}) / 100
	if perMember > 20 {
		t.Fatalf("ApplyBatch made %.1f allocations per member, want at most 20", perMember)
	}
}
