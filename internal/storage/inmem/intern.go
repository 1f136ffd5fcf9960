package inmem

import (
	"sync"
	"unsafe"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

// interned keeps one *Type and one data type URL string per type, and one
// *Tenancy per namespace, so that
// a hundred thousand stored resources of a type share them instead of each
// holding its own copies (about 150 bytes each). Stored resources are
// read-only, so sharing is safe.
type interned struct {
	mu        sync.Mutex
	types     map[typeKey]*pbresource.Type
	typeURLs  map[string]string
	tenancies map[string]*pbresource.Tenancy
}

// intern points res at the shared copies of its type and type URL. It
// writes only fields that do not already point there, so a resource that
// came out of the store (a Restore of what ForEach gave) is left untouched
// for its concurrent readers.
func (s *Store) intern(res *pbresource.Resource) {
	in := &s.shared
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.types == nil {
		in.types = make(map[typeKey]*pbresource.Type)
		in.typeURLs = make(map[string]string)
		in.tenancies = make(map[string]*pbresource.Tenancy)
	}
	if id := res.GetId(); id.GetType() != nil {
		key := keyOf(id.GetType())
		t, ok := in.types[key]
		if !ok {
			t = id.GetType()
			in.types[key] = t
		}
		if id.Type != t {
			id.Type = t
		}
		if id.Tenancy != nil {
			ns := id.Tenancy.GetNamespace()
			tn, ok := in.tenancies[ns]
			if !ok {
				tn = id.Tenancy
				in.tenancies[ns] = tn
			}
			if id.Tenancy != tn {
				id.Tenancy = tn
			}
		}
	}
	if owner := res.GetOwner(); owner.GetType() != nil {
		if t, ok := in.types[keyOf(owner.GetType())]; ok && owner.Type != t {
			owner.Type = t
		}
	}
	if data := res.GetData(); data != nil {
		u, ok := in.typeURLs[data.GetTypeUrl()]
		if !ok {
			u = data.GetTypeUrl()
			in.typeURLs[u] = u
		}
		if unsafe.StringData(data.TypeUrl) != unsafe.StringData(u) {
			data.TypeUrl = u
		}
	}
}
