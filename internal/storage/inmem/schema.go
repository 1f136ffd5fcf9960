package inmem

import (
	"fmt"

	"github.com/hashicorp/go-memdb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
)

const (
	tableResources = "resources"
	indexID        = "id"
	indexOwner     = "owner"
)

// The id index key is type \x00 namespace \x00 name \x00, so that a prefix of
// it lists a type, a type in a namespace, or names with a prefix.
func newSchema() *memdb.DBSchema {
	return &memdb.DBSchema{
		Tables: map[string]*memdb.TableSchema{
			tableResources: {
				Name: tableResources,
				Indexes: map[string]*memdb.IndexSchema{
					indexID: {
						Name:    indexID,
						Unique:  true,
						Indexer: idIndexer{},
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
	if ns == storage.WildcardNamespace {
		return []byte(storage.TypeString(typ) + "\x00")
	}
	return []byte(storage.TypeString(typ) + "\x00" + ns + "\x00" + namePrefix)
}

type idIndexer struct{}

func (idIndexer) FromObject(obj any) (bool, []byte, error) {
	res, ok := obj.(*pbresource.Resource)
	if !ok {
		return false, nil, fmt.Errorf("expected *Resource, got %T", obj)
	}
	return true, nameKey(res.GetId()), nil
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
