package storage

import (
	"strings"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// Matches reports whether res falls under a List or WatchList query.
func Matches(res *pbresource.Resource, typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string) bool {
	id := res.GetId()
	if !ids.SameType(id.GetType(), typ) {
		return false
	}
	if ns := tenancy.GetNamespace(); ns != ids.WildcardNamespace && ns != id.GetTenancy().GetNamespace() {
		return false
	}
	return strings.HasPrefix(id.GetName(), namePrefix)
}
