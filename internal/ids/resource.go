package ids

import pbresource "trellis.dev/trellis/api/resource/v1"

// WildcardNamespace in a List or WatchList tenancy matches every namespace.
const WildcardNamespace = "*"

// TypeString formats a type as group/version/kind.
func TypeString(t *pbresource.Type) string {
	return t.GetGroup() + "/" + t.GetGroupVersion() + "/" + t.GetKind()
}

// String formats an id as group/version/kind/namespace/name for messages.
func String(id *pbresource.ID) string {
	ns := id.GetTenancy().GetNamespace()
	if ns == "" {
		return TypeString(id.GetType()) + "/" + id.GetName()
	}
	return TypeString(id.GetType()) + "/" + ns + "/" + id.GetName()
}

// SameType reports whether a and b are the same group, version and kind.
func SameType(a, b *pbresource.Type) bool {
	return a.GetGroup() == b.GetGroup() && a.GetGroupVersion() == b.GetGroupVersion() && a.GetKind() == b.GetKind()
}

// SameName reports whether a and b name the same resource slot (type,
// namespace, name), whatever their uids.
func SameName(a, b *pbresource.ID) bool {
	return SameType(a.GetType(), b.GetType()) &&
		a.GetTenancy().GetNamespace() == b.GetTenancy().GetNamespace() &&
		a.GetName() == b.GetName()
}
