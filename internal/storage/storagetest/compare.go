package storagetest

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

func compareVersion(i *pbresource.ID, version string) *pbresource.Compare {
	return &pbresource.Compare{Op: pbresource.Compare_OP_VERSION, Id: i, Version: version}
}

func compareAbsent(i *pbresource.ID) *pbresource.Compare {
	return &pbresource.Compare{Op: pbresource.Compare_OP_ABSENT, Id: i}
}

func compareExists(i *pbresource.ID) *pbresource.Compare {
	return &pbresource.Compare{Op: pbresource.Compare_OP_EXISTS, Id: i}
}

func compareNothingNewer(typ *pbresource.Type, ns, prefix, version string) *pbresource.Compare {
	return &pbresource.Compare{Op: pbresource.Compare_OP_NOTHING_NEWER, Id: id(typ, ns, prefix), Version: version}
}

// maxVersion is the largest version of rs, as a List's caller finds it.
func maxVersion(t *testing.T, rs ...*pbresource.Resource) string {
	t.Helper()
	var m uint64
	for _, r := range rs {
		v, err := strconv.ParseUint(r.GetVersion(), 10, 64)
		if err != nil {
			t.Fatalf("version %q of %s is not a store index: %v", r.GetVersion(), describe(r), err)
		}
		m = max(m, v)
	}
	return strconv.FormatUint(m, 10)
}

func testCompareAllHold(t *testing.T, b storage.Backend) {
	typ := testType("CompareHold")
	x := mustWrite(t, b, newResource(typ, "default", "x"))
	y := mustWrite(t, b, newResource(typ, "default", "y"))
	compares := []*pbresource.Compare{
		compareVersion(x.GetId(), x.GetVersion()),
		compareVersion(idWithUID(y.GetId(), ""), y.GetVersion()),
		compareExists(y.GetId()),
		compareExists(idWithUID(x.GetId(), "")),
		compareAbsent(id(typ, "default", "free")),
		compareAbsent(id(typ, "other", "x")),
		compareNothingNewer(typ, "default", "", maxVersion(t, x, y)),
	}
	created := newResource(typ, "default", "new")
	out, err := b.WriteBatch(t.Context(), cloneAll([]*pbresource.Resource{created}), compares...)
	if err != nil {
		t.Fatalf("WriteBatch whose compares all hold: %v", err)
	}
	if len(out) != 1 {
		t.Fatalf("WriteBatch returned %d resources for one write; compares store nothing", len(out))
	}
	requireStored(t, b, withVersion(created, out[0].GetVersion()))
	requireStored(t, b, x)
	requireStored(t, b, y)
	requireAbsent(t, b, id(typ, "default", "free"))
}

func testCompareFailsStoresNothing(t *testing.T, b storage.Backend) {
	typ := testType("CompareFail")
	x := mustWrite(t, b, newResource(typ, "default", "x"))
	stale := x.GetVersion()
	x = mustWrite(t, b, withData(x, "second"))
	other := mustWrite(t, b, newResource(typ, "default", "other"))
	hold := compareExists(x.GetId())
	for name, bad := range map[string]*pbresource.Compare{
		"stale version":           compareVersion(x.GetId(), stale),
		"version of another uid":  compareVersion(idWithUID(x.GetId(), newUID()), x.GetVersion()),
		"version of nothing":      compareVersion(id(typ, "default", "missing"), "1"),
		"absent but exists":       compareAbsent(idWithUID(x.GetId(), "")),
		"exists but absent":       compareExists(id(typ, "default", "missing")),
		"exists with another uid": compareExists(idWithUID(x.GetId(), newUID())),
		"something newer":         compareNothingNewer(typ, "default", "", stale),
		"nothing at all":          compareNothingNewer(typ, "default", "", ""),
	} {
		created := newResource(typ, "default", "new")
		update := withData(other, "batched")
		out, err := b.WriteBatch(t.Context(), cloneAll([]*pbresource.Resource{created, update}), hold, bad)
		if !errors.Is(err, storage.ErrBatchConflict) || !errors.Is(err, storage.ErrCompareFailed) {
			t.Errorf("%s: WriteBatch = %d resources, %v; want an error wrapping ErrBatchConflict and ErrCompareFailed", name, len(out), err)
			continue
		}
		if !strings.Contains(err.Error(), "compare 1") || !strings.Contains(err.Error(), bad.GetId().GetName()) {
			t.Errorf("%s: error %q does not name compare 1 (%s)", name, err, bad.GetId().GetName())
		}
		requireAbsent(t, b, created.GetId())
		requireStored(t, b, other)
		requireStored(t, b, x)
	}
	// A batch of compares alone answers the same, and writes nothing.
	if _, err := b.WriteBatch(t.Context(), nil, compareAbsent(x.GetId())); !errors.Is(err, storage.ErrCompareFailed) {
		t.Errorf("a batch of one failing compare: %v, want ErrCompareFailed", err)
	}
	if out, err := b.WriteBatch(t.Context(), nil, compareExists(x.GetId())); err != nil || len(out) != 0 {
		t.Errorf("a batch of one compare that holds = %d resources, %v; want none and no error", len(out), err)
	}
	requireStored(t, b, x)
}

// The compares see the state before the batch's writes: a batch may
// check that a name is free and create it, or check a version and write
// over it.
func testCompareSeesStateBeforeWrites(t *testing.T, b storage.Backend) {
	typ := testType("CompareBefore")
	x := mustWrite(t, b, newResource(typ, "default", "x"))
	created := newResource(typ, "default", "new")
	batch := []*pbresource.Resource{created, withData(x, "updated")}
	compares := []*pbresource.Compare{
		compareAbsent(created.GetId()),
		compareVersion(x.GetId(), x.GetVersion()),
		compareNothingNewer(typ, "default", "", x.GetVersion()),
	}
	out, err := b.WriteBatch(t.Context(), cloneAll(batch), compares...)
	if err != nil {
		t.Fatalf("WriteBatch whose compares hold before its writes: %v", err)
	}
	for i := range batch {
		requireStored(t, b, withVersion(batch[i], out[0].GetVersion()))
	}
	// The same again: now the name is taken, x has moved on, and both
	// were written after x's old version.
	for i, c := range compares {
		_, err := b.WriteBatch(t.Context(), []*pbresource.Resource{newResource(typ, "default", "again")}, c)
		if !errors.Is(err, storage.ErrCompareFailed) {
			t.Errorf("compare %d after the batch: %v, want ErrCompareFailed", i, err)
		}
	}
	requireAbsent(t, b, id(typ, "default", "again"))
}

// OP_NOTHING_NEWER looks only at its type, tenancy and name prefix, and
// deletes do not count.
func testCompareNothingNewerScope(t *testing.T, b storage.Backend) {
	typ := testType("CompareScope")
	a := mustWrite(t, b, newResource(typ, "default", "app-a"))
	z := mustWrite(t, b, newResource(typ, "default", "zz"))
	since := maxVersion(t, a, z)
	mustWrite(t, b, newResource(typ, "other", "app-b"))
	mustWrite(t, b, newResource(testType("CompareScopeOther"), "default", "app-b"))
	mustWrite(t, b, newResource(typ, "default", "web"))
	mustDelete(t, b, z.GetId(), "")

	holds := []*pbresource.Compare{
		compareNothingNewer(typ, "default", "app-", since),
		compareNothingNewer(typ, "default", "zz", since),
	}
	for i, c := range holds {
		if _, err := b.WriteBatch(t.Context(), []*pbresource.Resource{newResource(typ, "scratch", strconv.Itoa(i))}, c); err != nil {
			t.Errorf("nothing newer under prefix %q since %s (changes elsewhere, a delete): %v", c.GetId().GetName(), since, err)
		}
	}
	if _, err := b.WriteBatch(t.Context(), []*pbresource.Resource{newResource(typ, "scratch", "all")}, compareNothingNewer(typ, "default", "", since)); !errors.Is(err, storage.ErrCompareFailed) || !strings.Contains(err.Error(), "web") {
		t.Errorf("nothing newer in the whole namespace after web was created: %v, want ErrCompareFailed naming web", err)
	}
	requireAbsent(t, b, id(typ, "scratch", "all"))
}
