package storagetest

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/storage"
)

var consistencies = []storage.ReadConsistency{storage.StrongConsistency, storage.EventualConsistency}

func testReadNotFound(t *testing.T, b storage.Backend) {
	typ := testType("ReadNotFound")
	missing := id(typ, "default", "web")

	// Neighbours of the missing id: same name in another namespace, in
	// another group version, of another kind.
	otherVersion := &pbresource.Type{Group: typ.Group, GroupVersion: "v2", Kind: typ.Kind}
	mustWrite(t, b, newResource(typ, "other", "web"))
	mustWrite(t, b, newResource(otherVersion, "default", "web"))
	last := mustWrite(t, b, newResource(testType("ReadNotFoundOther"), "default", "web"))
	waitApplied(t, b, last.GetId(), last.GetVersion())

	for _, c := range consistencies {
		for _, i := range []*pbresource.ID{missing, idWithUID(missing, newUID())} {
			got, err := b.Read(t.Context(), c, i)
			if !errors.Is(err, storage.ErrNotFound) {
				t.Errorf("%s Read(%s, uid %q) = %s, %v; want ErrNotFound", c, ids.String(i), i.GetUid(), describe(got), err)
			}
		}
	}
}

func testReadWrongUID(t *testing.T, b storage.Backend) {
	typ := testType("ReadWrongUID")
	stored := mustWrite(t, b, newResource(typ, "default", "web"))
	waitApplied(t, b, stored.GetId(), stored.GetVersion())

	for _, c := range consistencies {
		got, err := b.Read(t.Context(), c, idWithUID(stored.GetId(), newUID()))
		if !errors.Is(err, storage.ErrWrongUID) {
			t.Errorf("%s Read with another uid = %s, %v; want ErrWrongUID", c, describe(got), err)
		}
		for _, uid := range []string{stored.GetId().GetUid(), ""} {
			got, err := b.Read(t.Context(), c, idWithUID(stored.GetId(), uid))
			if err != nil || !proto.Equal(got, stored) {
				t.Errorf("%s Read with uid %q = %v, %v; want %v", c, uid, got, err, stored)
			}
		}
	}
}

func testReadEventualConverges(t *testing.T, b storage.Backend) {
	typ := testType("ReadEventual")
	v1 := mustWrite(t, b, newResource(typ, "default", "web"))
	waitApplied(t, b, v1.GetId(), v1.GetVersion())
	got, err := b.Read(t.Context(), storage.EventualConsistency, v1.GetId())
	if err != nil || !proto.Equal(got, v1) {
		t.Fatalf("eventual Read after the write was applied = %v, %v; want %v", got, err, v1)
	}

	v2 := mustWrite(t, b, withData(v1, "second"))
	waitApplied(t, b, v2.GetId(), v2.GetVersion())
	got, err = b.Read(t.Context(), storage.EventualConsistency, v2.GetId())
	if err != nil || !proto.Equal(got, v2) {
		t.Fatalf("eventual Read after the update was applied = %v, %v; want %v", got, err, v2)
	}

	mustDelete(t, b, v2.GetId(), "")
	waitApplied(t, b, v2.GetId(), "")
}

func testWriteCreate(t *testing.T, b storage.Backend) {
	typ := testType("WriteCreate")
	res := newResource(typ, "default", "web")
	res.Owner = idWithUID(id(typ, "default", "owner"), newUID())
	res.Generation = 7
	res.Status = map[string]*pbresource.Status{"ctl": {ObservedGeneration: 7}}
	arg := proto.Clone(res).(*pbresource.Resource)

	out, err := b.WriteCAS(t.Context(), arg)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if out.GetVersion() == "" {
		t.Fatal("create returned an empty version")
	}
	if !proto.Equal(arg, res) {
		t.Errorf("WriteCAS changed its argument:\n got %v\nwant %v", arg, res)
	}
	want := withVersion(res, out.GetVersion())
	if !proto.Equal(out, want) {
		t.Errorf("create returned\n %v\nwant (the argument with the new version)\n %v", out, want)
	}
	requireStored(t, b, want)

	// The stored copy is not the caller's message: changing the argument
	// afterwards changes nothing stored.
	arg.Metadata["text"] = "changed after the write"
	arg.Id.Name = "renamed"
	requireStored(t, b, want)
}

func testWriteCreateWithVersion(t *testing.T, b storage.Backend) {
	typ := testType("WriteCreateWithVersion")
	res := withVersion(newResource(typ, "default", "web"), "1")
	got, err := b.WriteCAS(t.Context(), res)
	if !errors.Is(err, storage.ErrCASFailure) {
		t.Fatalf("write with a version when nothing is stored = %s, %v; want ErrCASFailure", describe(got), err)
	}
	requireAbsent(t, b, res.GetId())
}

func testWriteCreateOverExisting(t *testing.T, b storage.Backend) {
	typ := testType("WriteCreateOverExisting")
	first := mustWrite(t, b, newResource(typ, "default", "web"))
	for _, again := range []*pbresource.Resource{
		withData(first, "same uid, no version"),
		newResource(typ, "default", "web"), // another uid
	} {
		again.Version = ""
		got, err := b.WriteCAS(t.Context(), again)
		if !errors.Is(err, storage.ErrCASFailure) {
			t.Errorf("create over an existing resource = %s, %v; want ErrCASFailure", describe(got), err)
		}
	}
	requireStored(t, b, first)
}

func testWriteUpdate(t *testing.T, b storage.Backend) {
	typ := testType("WriteUpdate")
	v1 := mustWrite(t, b, newResource(typ, "default", "web"))
	upd := withData(v1, "second")
	v2 := mustWrite(t, b, upd)
	if v2.GetVersion() == v1.GetVersion() {
		t.Fatalf("update kept version %q", v1.GetVersion())
	}
	want := withVersion(upd, v2.GetVersion())
	if !proto.Equal(v2, want) {
		t.Errorf("update returned\n %v\nwant\n %v", v2, want)
	}
	requireStored(t, b, want)

	// An update that changes nothing but the version is still a write.
	v3 := mustWrite(t, b, v2)
	if v3.GetVersion() == v2.GetVersion() {
		t.Fatalf("identical update kept version %q", v2.GetVersion())
	}
	requireStored(t, b, withVersion(upd, v3.GetVersion()))
}

func testWriteStaleVersion(t *testing.T, b storage.Backend) {
	typ := testType("WriteStale")
	v1 := mustWrite(t, b, newResource(typ, "default", "web"))
	v2 := mustWrite(t, b, withData(v1, "second"))
	for _, version := range []string{v1.GetVersion(), "no-such-version"} {
		stale := withVersion(withData(v1, "stale"), version)
		got, err := b.WriteCAS(t.Context(), stale)
		if !errors.Is(err, storage.ErrCASFailure) {
			t.Errorf("write at version %q (stored %q) = %s, %v; want ErrCASFailure", version, v2.GetVersion(), describe(got), err)
		}
	}
	requireStored(t, b, v2)
}

func testWriteWrongUID(t *testing.T, b storage.Backend) {
	typ := testType("WriteWrongUID")
	v1 := mustWrite(t, b, newResource(typ, "default", "web"))
	for _, uid := range []string{newUID(), ""} {
		got, err := b.WriteCAS(t.Context(), withUID(withData(v1, "other incarnation"), uid))
		if !errors.Is(err, storage.ErrWrongUID) {
			t.Errorf("update at the stored version with uid %q (stored %q) = %s, %v; want ErrWrongUID",
				uid, v1.GetId().GetUid(), describe(got), err)
		}
	}
	requireStored(t, b, v1)
}

// testWriteVersionsNeverRepeat: every write of a name gets a version no
// earlier write of it had, across deletion and re-creation, so a CAS made
// against an earlier incarnation can never succeed.
func testWriteVersionsNeverRepeat(t *testing.T, b storage.Backend) {
	typ := testType("WriteVersions")
	seen := map[string]string{} // version -> which write
	record := func(res *pbresource.Resource, what string) {
		t.Helper()
		if prev, dup := seen[res.GetVersion()]; dup {
			t.Fatalf("%s got version %q, which %s already had", what, res.GetVersion(), prev)
		}
		seen[res.GetVersion()] = what
	}

	first := newResource(typ, "default", "web")
	cur := mustWrite(t, b, first)
	record(cur, "the create")
	oldVersions := []string{cur.GetVersion()}
	for i := range 10 {
		cur = mustWrite(t, b, withData(cur, "update"))
		record(cur, "update "+string(rune('a'+i)))
		oldVersions = append(oldVersions, cur.GetVersion())
	}
	// Writes of other names in between must not make versions repeat either.
	mustWrite(t, b, newResource(typ, "default", "other"))

	mustDelete(t, b, cur.GetId(), "")
	cur = mustWrite(t, b, withVersion(first, "")) // the same uid again
	record(cur, "the re-create")
	for i := range 3 {
		cur = mustWrite(t, b, withData(cur, "after re-create"))
		record(cur, "re-created update "+string(rune('a'+i)))
	}
	for _, old := range oldVersions {
		got, err := b.WriteCAS(t.Context(), withVersion(withData(cur, "stale"), old))
		if !errors.Is(err, storage.ErrCASFailure) {
			t.Fatalf("write at version %q of the first incarnation = %s, %v; want ErrCASFailure", old, describe(got), err)
		}
	}
	requireStored(t, b, cur)
}

func testDeleteMatchingVersion(t *testing.T, b storage.Backend) {
	typ := testType("DeleteMatching")
	res := mustWrite(t, b, newResource(typ, "default", "web"))
	keep := mustWrite(t, b, newResource(typ, "default", "web-2"))
	mustDelete(t, b, res.GetId(), res.GetVersion())
	requireAbsent(t, b, res.GetId())
	requireStored(t, b, keep)
}

func testDeleteAnyVersion(t *testing.T, b storage.Backend) {
	typ := testType("DeleteAny")
	res := mustWrite(t, b, newResource(typ, "default", "web"))
	res = mustWrite(t, b, withData(res, "second"))
	mustDelete(t, b, idWithUID(res.GetId(), ""), "")
	requireAbsent(t, b, res.GetId())
}

func testDeleteStaleVersion(t *testing.T, b storage.Backend) {
	typ := testType("DeleteStale")
	v1 := mustWrite(t, b, newResource(typ, "default", "web"))
	v2 := mustWrite(t, b, withData(v1, "second"))
	for _, version := range []string{v1.GetVersion(), "no-such-version"} {
		err := b.DeleteCAS(t.Context(), v2.GetId(), version)
		if !errors.Is(err, storage.ErrCASFailure) {
			t.Errorf("delete at version %q (stored %q) = %v; want ErrCASFailure", version, v2.GetVersion(), err)
		}
	}
	requireStored(t, b, v2)
}

func testDeleteIdempotent(t *testing.T, b storage.Backend) {
	typ := testType("DeleteIdempotent")
	never := id(typ, "default", "never-written")
	for _, version := range []string{"", "123"} {
		if err := b.DeleteCAS(t.Context(), never, version); err != nil {
			t.Errorf("delete of a missing resource at version %q = %v; want nil", version, err)
		}
	}
	res := mustWrite(t, b, newResource(typ, "default", "web"))
	mustDelete(t, b, res.GetId(), res.GetVersion())
	mustDelete(t, b, res.GetId(), res.GetVersion()) // again, same version
	mustDelete(t, b, res.GetId(), "")
	requireAbsent(t, b, res.GetId())
}

func testDeleteOldUID(t *testing.T, b storage.Backend) {
	typ := testType("DeleteOldUID")
	old := mustWrite(t, b, newResource(typ, "default", "web"))
	mustDelete(t, b, old.GetId(), "")
	cur := mustWrite(t, b, newResource(typ, "default", "web"))
	if cur.GetId().GetUid() == old.GetId().GetUid() {
		t.Fatal("fixture: re-created with the same uid")
	}
	for _, version := range []string{"", old.GetVersion(), cur.GetVersion()} {
		if err := b.DeleteCAS(t.Context(), old.GetId(), version); err != nil {
			t.Errorf("delete naming the old uid at version %q = %v; want nil (a no-op)", version, err)
		}
	}
	requireStored(t, b, cur)
}
