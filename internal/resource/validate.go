package resource

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ids"
)

// Limits on what a resource may hold.
const (
	// MaxResourceSize is the largest encoded resource the service stores.
	MaxResourceSize = 1 << 20
	// MaxNameLength is the longest name (and namespace): a DNS label.
	MaxNameLength = 63
	// MaxMetadataEntries is the most metadata keys a resource may carry.
	MaxMetadataEntries = 128
	// MaxMetadataValueLength is the longest metadata value, in bytes.
	MaxMetadataValueLength = 4096
)

const dnsLabelRule = "must be a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)"

// IsDNSLabel reports whether s is a lowercase RFC 1123 DNS label: 1 to 63
// characters of a-z, 0-9 and '-', starting and ending with a letter or digit.
func IsDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// ValidateName checks that a name is a lowercase DNS label, naming field in
// the error. Types use it for names held in their data.
func ValidateName(field, name string) error {
	if name == "" {
		return NewFieldError(field, "is required")
	}
	if !IsDNSLabel(name) {
		return NewFieldError(field, "%q is not a valid name: %s", name, dnsLabelRule)
	}
	return nil
}

// isDNSSubdomain reports whether s is a lowercase RFC 1123 subdomain: DNS
// labels joined by dots, at most 253 characters.
func isDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if !IsDNSLabel(label) {
			return false
		}
	}
	return true
}

// isQualifiedName reports whether s has the form of a Kubernetes label key:
// an optional DNS subdomain prefix and '/', then a name of at most 63
// characters of letters, digits, '-', '_' and '.', starting and ending with
// a letter or digit.
func isQualifiedName(s string) bool {
	name := s
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		if !isDNSSubdomain(s[:i]) {
			return false
		}
		name = s[i+1:]
	}
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum {
			continue
		}
		if (c == '-' || c == '_' || c == '.') && i > 0 && i < len(name)-1 {
			continue
		}
		return false
	}
	return true
}

const qualifiedNameRule = "must be an optional DNS subdomain and '/', then 1 to 63 characters of letters, digits, '-', '_' or '.' starting and ending with a letter or digit (like a Kubernetes label key)"

// ValidateQualifiedName checks a key such as a metadata key or a status key
// (a controller name): "name" or "example.com/name".
func ValidateQualifiedName(field, s string) error {
	if s == "" {
		return NewFieldError(field, "is required")
	}
	if !isQualifiedName(s) {
		return NewFieldError(field, "%q is not valid: %s", s, qualifiedNameRule)
	}
	return nil
}

// resolveType checks that typ is given and registered.
func (r *Registry) resolveType(field string, typ *pbresource.Type) (Registration, error) {
	if typ == nil {
		return Registration{}, NewFieldError(field, "is required")
	}
	if typ.GetGroup() == "" || typ.GetGroupVersion() == "" || typ.GetKind() == "" {
		return Registration{}, NewFieldError(field, "must name a group, group_version and kind (got %q)", ids.TypeString(typ))
	}
	reg, ok := r.Resolve(typ)
	if !ok {
		return Registration{}, NewFieldError(field, "unknown resource type %q", ids.TypeString(typ))
	}
	return reg, nil
}

// normalizeNamespace applies the type's scope to a namespace: empty for
// cluster-scoped types; "default" when a namespaced type gives none.
func normalizeNamespace(field string, reg Registration, ns string) (string, error) {
	if reg.Scope == ScopeCluster {
		if ns != "" {
			return "", NewFieldError(field, "must be empty: %s is cluster-scoped (got %q)", ids.TypeString(reg.Type), ns)
		}
		return "", nil
	}
	if ns == "" {
		return DefaultNamespace, nil
	}
	if !IsDNSLabel(ns) {
		return "", NewFieldError(field, "%q is not a valid namespace: %s", ns, dnsLabelRule)
	}
	return ns, nil
}

// checkID validates an id and returns a normalized copy (namespace filled
// in for namespaced types) with its registration. The uid is kept as given.
func (r *Registry) checkID(field string, id *pbresource.ID) (*pbresource.ID, Registration, error) {
	nid, reg, err := r.checkIDFields(id)
	if err != nil {
		// The field path is built only for a refusal.
		return nil, Registration{}, withPrefix(field, err)
	}
	return nid, reg, nil
}

func (r *Registry) checkIDFields(id *pbresource.ID) (*pbresource.ID, Registration, error) {
	if id == nil {
		return nil, Registration{}, NewFieldError("", "is required")
	}
	reg, err := r.resolveType("type", id.GetType())
	if err != nil {
		return nil, Registration{}, err
	}
	if err := ValidateName("name", id.GetName()); err != nil {
		return nil, Registration{}, err
	}
	ns, err := normalizeNamespace("tenancy.namespace", reg, id.GetTenancy().GetNamespace())
	if err != nil {
		return nil, Registration{}, err
	}
	if len(id.GetUid()) > 64 {
		return nil, Registration{}, NewFieldError("uid", "is %d characters long, over the limit of 64", len(id.GetUid()))
	}
	return &pbresource.ID{
		Uid:     id.GetUid(),
		Name:    id.GetName(),
		Type:    &pbresource.Type{Group: reg.Type.GetGroup(), GroupVersion: reg.Type.GetGroupVersion(), Kind: reg.Type.GetKind()},
		Tenancy: &pbresource.Tenancy{Namespace: ns},
	}, reg, nil
}

// checkOwner validates an owner reference: a full id of a registered type,
// uid included, since ownership is tied to one incarnation of the owner.
func (r *Registry) checkOwner(field string, owner *pbresource.ID) (*pbresource.ID, error) {
	id, _, err := r.checkID(field, owner)
	if err != nil {
		return nil, err
	}
	if id.GetUid() == "" {
		return nil, NewFieldError(joinField(field, "uid"), "is required: an owner is one incarnation of a resource, named by its uid")
	}
	return id, nil
}

// checkListQuery validates the type, tenancy and name prefix of a List or
// WatchList request. The returned tenancy is normalized: "*" stays the
// wildcard, empty becomes "default" for namespaced types.
func (r *Registry) checkListQuery(typ *pbresource.Type, tenancy *pbresource.Tenancy, namePrefix string) (Registration, *pbresource.Tenancy, error) {
	reg, err := r.resolveType("type", typ)
	if err != nil {
		return Registration{}, nil, err
	}
	ns := tenancy.GetNamespace()
	if ns != ids.WildcardNamespace {
		if ns, err = normalizeNamespace("tenancy.namespace", reg, ns); err != nil {
			return Registration{}, nil, err
		}
	}
	if len(namePrefix) > MaxNameLength || strings.TrimLeft(namePrefix, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return Registration{}, nil, NewFieldError("name_prefix", "%q cannot begin any valid name: %s", namePrefix, dnsLabelRule)
	}
	return reg, &pbresource.Tenancy{Namespace: ns}, nil
}

// checkMetadata validates metadata keys and values.
func checkMetadata(md map[string]string) error {
	if len(md) > MaxMetadataEntries {
		return NewFieldError("metadata", "has %d entries, over the limit of %d", len(md), MaxMetadataEntries)
	}
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same key every time
	for _, k := range keys {
		field := fmt.Sprintf("metadata[%q]", k)
		if !isQualifiedName(k) {
			return NewFieldError(field, "key is not valid: %s", qualifiedNameRule)
		}
		v := md[k]
		if len(v) > MaxMetadataValueLength {
			return NewFieldError(field, "value is %d bytes long, over the limit of %d", len(v), MaxMetadataValueLength)
		}
		if !utf8.ValidString(v) {
			return NewFieldError(field, "value is not valid UTF-8")
		}
	}
	return nil
}

// decodeData checks that data is the registered message of reg and decodes
// it into a new instance of that message.
func decodeData(reg Registration, data *anypb.Any) (proto.Message, error) {
	want := reg.Proto.ProtoReflect().Descriptor().FullName()
	if data == nil {
		return nil, NewFieldError("data", "is required: a %s", want)
	}
	got := data.MessageName()
	if got != want {
		return nil, NewFieldError("data", "has type %q but %s holds %s", data.GetTypeUrl(), ids.TypeString(reg.Type), want)
	}
	msg := reg.Proto.ProtoReflect().New().Interface()
	if err := proto.Unmarshal(data.GetValue(), msg); err != nil {
		return nil, NewFieldError("data", "does not decode as %s: %v", want, err)
	}
	return msg, nil
}

// checkSize refuses a resource whose encoding is over MaxResourceSize.
func checkSize(res *pbresource.Resource) error {
	if n := proto.Size(res); n > MaxResourceSize {
		return &sizeError{size: n}
	}
	return nil
}

// sizeError is reported as ResourceExhausted.
type sizeError struct{ size int }

func (e *sizeError) Error() string {
	return fmt.Sprintf("resource is %d bytes encoded, over the limit of %d bytes", e.size, MaxResourceSize)
}
