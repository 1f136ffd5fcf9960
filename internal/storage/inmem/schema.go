package inmem

import (
	"fmt"
	"unsafe"

	"github.com/hashicorp/go-memdb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

const (
	tableResources = "resources"
	indexID        = "id"
	indexOwner     = "owner"
)

// The id index key is type \x00 namespace \x00 name \x00, so that a prefix of
// it lists a type, a type in a namespace, or names with a prefix. next is
// the key a write has already built for the resource it inserts.
func newSchema(next *nextKey) *memdb.DBSchema {
	return &memdb.DBSchema{
		Tables: map[string]*memdb.TableSchema{
			tableResources: {
				Name: tableResources,
				Indexes: map[string]*memdb.IndexSchema{
					indexID: {
						Name:    indexID,
						Unique:  true,
						Indexer: idIndexer{next: next},
					},
					indexOwner: {
						Name:         indexOwner,
						AllowMissing: true,
						Indexer:      ownerIndexer{},
					},
				},
			},
		},
	}
}

func nameKey(id *pbresource.ID) []byte {
	t := id.GetType()
	ns, name := id.GetTenancy().GetNamespace(), id.GetName()
	b := make([]byte, 0, len(t.GetGroup())+len(t.GetGroupVersion())+len(t.GetKind())+len(ns)+len(name)+5)
	b = append(b, t.GetGroup()...)
	b = append(b, '/')
	b = append(b, t.GetGroupVersion()...)
	b = append(b, '/')
	b = append(b, t.GetKind()...)
	b = append(b, 0)
	b = append(b, ns...)
	b = append(b, 0)
	b = append(b, name...)
	return append(b, 0)
}

// typeKey identifies a type in maps without building a string.
type typeKey struct{ group, version, kind string }

func keyOf(t *pbresource.Type) typeKey {
	return typeKey{t.GetGroup(), t.GetGroupVersion(), t.GetKind()}
}

func ownerKey(id *pbresource.ID) []byte {
	return append(nameKey(id), append([]byte(id.GetUid()), 0)...)
}

// listPrefix is the id-index prefix for a List query. With the wildcard
// namespace it covers the whole type and the caller filters the rest.
func listPrefix(typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string) []byte {
	ns := tenancy.GetNamespace()
	if ns == ids.WildcardNamespace {
		return []byte(ids.TypeString(typ) + "\x00")
	}
	return []byte(ids.TypeString(typ) + "\x00" + ns + "\x00" + namePrefix)
}

// nextKey hands the id index the key a write has built for the resource it
// is about to insert, so that the index keeps that key, which the stored
// name points into (see shareName), rather than building a second one. It
// is set and read only by the writer of the database whose schema holds it.
type nextKey struct {
	res *pbresource.Resource
	key []byte
}

type idIndexer struct{ next *nextKey }

func (ix idIndexer) FromObject(obj any) (bool, []byte, error) {
	res, ok := obj.(*pbresource.Resource)
	if !ok {
		return false, nil, fmt.Errorf("expected *Resource, got %T", obj)
	}
	if ix.next != nil && ix.next.res == res {
		return true, ix.next.key, nil
	}
	return true, nameKey(res.GetId()), nil
}

// shareName points the name of res, which must not yet be visible to any
// reader, at its bytes inside key (its nameKey), which the id index keeps
// for as long as res is stored: one copy of the name instead of two, 16
// bytes or more of every stored resource.
func shareName(res *pbresource.Resource, key []byte) {
	id := res.GetId()
	n := len(id.GetName())
	if n == 0 {
		return
	}
	id.Name = unsafe.String(&key[len(key)-1-n], n)
}

func (idIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("expected one argument, got %d", len(args))
	}
	switch a := args[0].(type) {
	case *pbresource.ID:
		return nameKey(a), nil
	case []byte:
		return a, nil
	}
	return nil, fmt.Errorf("unexpected argument %T", args[0])
}

func (i idIndexer) PrefixFromArgs(args ...any) ([]byte, error) { return i.FromArgs(args...) }

type ownerIndexer struct{}

func (ownerIndexer) FromObject(obj any) (bool, []byte, error) {
	res, ok := obj.(*pbresource.Resource)
	if !ok {
		return false, nil, fmt.Errorf("expected *Resource, got %T", obj)
	}
	if res.GetOwner() == nil {
		return false, nil, nil
	}
	return true, ownerKey(res.GetOwner()), nil
}

func (ownerIndexer) FromArgs(args ...any) ([]byte, error) {
	if len(args) != 1 {
		return nil, fmt.Errorf("expected one argument, got %d", len(args))
	}
	id, ok := args[0].(*pbresource.ID)
	if !ok {
		return nil, fmt.Errorf("unexpected argument %T", args[0])
	}
	return ownerKey(id), nil
}
