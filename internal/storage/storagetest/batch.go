package storagetest

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

func testBatchAll(t *testing.T, b storage.Backend) {
	typ := testType("BatchAll")
	existing := mustWrite(t, b, newResource(typ, "default", "existing"))
	batch := []*pbresource.Resource{
		newResource(typ, "default", "a"),
		withData(existing, "updated in a batch"),
		newResource(typ, "other", "a"),
		newResource(testType("BatchAllOther"), "default", "a"),
	}
	args := cloneAll(batch)

	out, err := b.WriteBatch(t.Context(), args)
	if err != nil {
		t.Fatalf("WriteBatch: %v", err)
	}
	if len(out) != len(batch) {
		t.Fatalf("WriteBatch returned %d resources, want %d", len(out), len(batch))
	}
	version := out[0].GetVersion()
	if version == "" || version == existing.GetVersion() {
		t.Fatalf("batch version %q (the updated member was at %q)", version, existing.GetVersion())
	}
	for i, res := range batch {
		if !proto.Equal(args[i], res) {
			t.Errorf("WriteBatch changed its argument %d:\n got %v\nwant %v", i, args[i], res)
		}
		want := withVersion(res, version)
		if !proto.Equal(out[i], want) {
			t.Errorf("WriteBatch result %d (in the order given):\n got %v\nwant %v", i, out[i], want)
		}
		requireStored(t, b, want)
	}
}

// batchWithOneBadMember builds a batch of creates and updates, all valid but
// member 2, which is made bad by spoil. It returns the batch, what is stored
// before it, and the ids of its creates.
func batchWithOneBadMember(t *testing.T, b storage.Backend, kind string, spoil func(*pbresource.Resource) *pbresource.Resource) (batch, before []*pbresource.Resource, creates []*pbresource.ID) {
	typ := testType(kind)
	x := mustWrite(t, b, newResource(typ, "default", "x"))
	y := mustWrite(t, b, newResource(typ, "default", "y"))
	z := mustWrite(t, b, newResource(typ, "default", "z"))
	y2 := mustWrite(t, b, withData(y, "second")) // y's first version is now stale
	batch = []*pbresource.Resource{
		newResource(typ, "default", "new-1"),
		withData(x, "batched"),
		spoil(withData(y, "batched")),
		withData(z, "batched"),
		newResource(typ, "default", "new-2"),
	}
	return batch, []*pbresource.Resource{x, y2, z}, []*pbresource.ID{batch[0].GetId(), batch[4].GetId()}
}

// requireBatchRefused checks that the batch failed naming its bad member and
// stored nothing.
func requireBatchRefused(t *testing.T, b storage.Backend, batch, before []*pbresource.Resource, creates []*pbresource.ID) {
	t.Helper()
	out, err := b.WriteBatch(t.Context(), cloneAll(batch))
	if !errors.Is(err, storage.ErrBatchConflict) {
		t.Fatalf("WriteBatch with one bad member = %d resources, %v; want an error wrapping ErrBatchConflict", len(out), err)
	}
	if bad := batch[2].GetId().GetName(); !strings.Contains(err.Error(), bad) {
		t.Errorf("batch error %q does not name the member that failed (%s)", err, bad)
	}
	for _, res := range before {
		requireStored(t, b, res)
	}
	for _, i := range creates {
		requireAbsent(t, b, i)
	}
}

func testBatchStaleMember(t *testing.T, b storage.Backend) {
	batch, before, creates := batchWithOneBadMember(t, b, "BatchStale", func(r *pbresource.Resource) *pbresource.Resource { return r })
	requireBatchRefused(t, b, batch, before, creates)

	// The same batch with the member fixed goes through whole.
	batch[2].Version = before[1].GetVersion()
	out, err := b.WriteBatch(t.Context(), cloneAll(batch))
	if err != nil {
		t.Fatalf("the batch with its stale member fixed: %v", err)
	}
	for i := range batch {
		requireStored(t, b, withVersion(batch[i], out[0].GetVersion()))
	}
}

func testBatchWrongUIDMember(t *testing.T, b storage.Backend) {
	batch, before, creates := batchWithOneBadMember(t, b, "BatchWrongUID", func(r *pbresource.Resource) *pbresource.Resource {
		return withUID(r, newUID())
	})
	batch[2].Version = before[1].GetVersion() // only the uid is wrong
	requireBatchRefused(t, b, batch, before, creates)
}

func testBatchDuplicate(t *testing.T, b storage.Backend) {
	typ := testType("BatchDuplicate")
	existing := mustWrite(t, b, newResource(typ, "default", "existing"))
	for name, batch := range map[string][]*pbresource.Resource{
		"two creates": {
			newResource(typ, "default", "other"),
			newResource(typ, "default", "dup"),
			newResource(typ, "default", "dup"),
		},
		"two updates": {
			newResource(typ, "default", "other"),
			withData(existing, "first"),
			withData(existing, "second"),
		},
		"one name, two uids": {
			newResource(typ, "default", "other"),
			withData(existing, "first"),
			withVersion(newResource(typ, "default", "existing"), existing.GetVersion()),
		},
	} {
		out, err := b.WriteBatch(t.Context(), cloneAll(batch))
		if err == nil {
			t.Errorf("%s: WriteBatch naming one resource twice stored %d resources; want it refused", name, len(out))
		}
		requireAbsent(t, b, batch[0].GetId())
		requireAbsent(t, b, id(typ, "default", "dup"))
		requireStored(t, b, existing)
	}
}

func cloneAll(rs []*pbresource.Resource) []*pbresource.Resource {
	out := make([]*pbresource.Resource, len(rs))
	for i, r := range rs {
		out[i] = proto.Clone(r).(*pbresource.Resource)
	}
	return out
}
