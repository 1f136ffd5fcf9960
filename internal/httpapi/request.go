package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/ids"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// This file turns the parts of a request (body, path, query) into plain
// values, refusing bad input with errors that name the field.

// decodeJSON reads one JSON object from body into v, refusing unknown
// fields, unpaired surrogate escapes and anything after the object.
func decodeJSON(body io.Reader, v any) error {
	b, err := io.ReadAll(body)
	if err != nil {
		return jsonError(err)
	}
	if err := checkEscapes(b); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return inputError("body", "unexpected data after the JSON object")
	}
	return nil
}

// checkEscapes refuses a \u escape of half a UTF-16 surrogate pair that
// lacks its other half ("\ud800" alone), naming its offset (counted from
// 1, as encoding/json counts). encoding/json would turn it into U+FFFD
// without a word, and protojson fails on it with a bare "unexpected EOF":
// neither tells the caller what is wrong (RFC 7493 forbids such strings).
// Other malformed JSON is left to the decoders, which say where it is.
func checkEscapes(b []byte) error {
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c != '\\' || i+1 >= len(b):
		case b[i+1] != 'u':
			i++ // a one-character escape: skip what it escapes
		default:
			r, ok := hex4(b, i+2)
			if !ok {
				i++
				continue // not an escape at all: the decoder says so
			}
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return unpaired(b, i, "a low surrogate must follow a high one (\\ud800-\\udbff)")
			case r >= 0xd800 && r <= 0xdbff:
				next, ok := uint16(0), i+6 < len(b)-1 && b[i+6] == '\\' && b[i+7] == 'u'
				if ok {
					next, ok = hex4(b, i+8)
				}
				if !ok || next < 0xdc00 || next > 0xdfff {
					return unpaired(b, i, "a high surrogate must be followed by a low one (\\udc00-\\udfff)")
				}
				i += 11
			default:
				i += 5
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits of a \u escape at b[at:].
func hex4(b []byte, at int) (uint16, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 16)
	return uint16(n), err == nil
}

func unpaired(b []byte, at int, rule string) error {
	return inputError("body", "invalid JSON escape at byte %d: %s is an unpaired UTF-16 surrogate: %s", at+1, string(b[at:at+6]), rule)
}

// checkVersion refuses a resource version that no read can have returned:
// versions are decimal numbers ("0" asks a write to create only). Without
// this a malformed one reached the store and failed as a conflict (409),
// which says "re-read and retry" to a request that can never succeed.
func checkVersion(field, v string) error {
	if v == "" {
		return nil
	}
	if _, err := strconv.ParseUint(v, 10, 64); err != nil {
		return inputError(field, "%q is not a resource version: give the version a read returned (a decimal number, like \"42\"), or \"0\" to create only", v)
	}
	return nil
}

// jsonError rewords encoding/json's errors to name the field at fault.
func jsonError(err error) error {
	var (
		mbe    *http.MaxBytesError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return &FieldError{Field: "body", Reason: fmt.Sprintf("over the limit of %d bytes", mbe.Limit), kind: ErrTooLarge}
	case errors.Is(err, io.EOF):
		return inputError("body", "empty; expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return inputError("body", "malformed JSON: unexpected end of input")
	case errors.As(err, &syntax):
		return inputError("body", "malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ):
		field := "body"
		if f := strings.TrimPrefix(typ.Field, "WriteRequest."); f != "" {
			field = f // the path of JSON names, less the embedded struct
		}
		return inputError(field, "expected %s, got a JSON %s", jsonKind(typ.Type.Kind().String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return inputError("body", "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return inputError("body", "%s", strings.TrimPrefix(err.Error(), "json: "))
}

func jsonKind(goKind string) string {
	switch goKind {
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "a list"
	case "string":
		return "a string"
	}
	return "a " + goKind
}

// writeBody is what PUT on a resource accepts: the write request, plus the
// read-only fields of a response so a fetched resource can be put back.
type writeBody struct {
	wire.WriteRequest
	ID         *wire.ID        `json:"id,omitempty"`
	Generation json.RawMessage `json:"generation,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"`
}

// typeFromPath resolves the {group}/{version}/{kind} of a request.
func typeFromPath(reg *resource.Registry, r *http.Request) (*pbresource.Type, resource.Registration, error) {
	typ := &pbresource.Type{
		Group:        r.PathValue("group"),
		GroupVersion: r.PathValue("version"),
		Kind:         r.PathValue("kind"),
	}
	return resolveType(reg, typ, "type")
}

func resolveType(reg *resource.Registry, typ *pbresource.Type, field string) (*pbresource.Type, resource.Registration, error) {
	regn, ok := reg.Resolve(typ)
	if !ok {
		return nil, resource.Registration{}, inputError(field, "unknown resource type %s (known types: %s)",
			ids.TypeString(typ), knownTypes(reg))
	}
	return typ, regn, nil
}

// knownTypes names the types the generic routes serve: sealed types
// (resource.Registration.Sealed) are not among them.
func knownTypes(reg *resource.Registry) string {
	var names []string
	for _, r := range reg.Types() {
		if !r.Sealed {
			names = append(names, ids.TypeString(r.Type))
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// tenancyFor applies a type's scope to a namespace given by the caller:
// namespaced types default to "default"; cluster-scoped types take none.
// The wildcard "*" is allowed only where lists is true.
func tenancyFor(regn resource.Registration, namespace string, lists bool, field string) (*pbresource.Tenancy, error) {
	if regn.Scope == resource.ScopeCluster {
		if namespace != "" && namespace != ids.WildcardNamespace {
			return nil, inputError(field, "%s is cluster-scoped: give no namespace (got %q)",
				ids.TypeString(regn.Type), namespace)
		}
		return &pbresource.Tenancy{}, nil
	}
	switch namespace {
	case "":
		namespace = "default"
	case ids.WildcardNamespace:
		if !lists {
			return nil, inputError(field, `"*" (every namespace) is only for lists and watches`)
		}
	}
	return &pbresource.Tenancy{Namespace: namespace}, nil
}

// query holds the query parameters of a request.
// ctx is the request's context, asking for a stale read when q does
// (storage.WithStale).
func (q query) ctx(r *http.Request) context.Context {
	if q.stale {
		return storage.WithStale(r.Context())
	}
	return r.Context()
}

type query struct {
	namespace  string
	prefix     string
	version    string
	consistent bool
	stale      bool
	watch      bool
	index      uint64
	typ        string
}

// parseQuery reads the query parameters named in allowed, refusing any
// other, so a misspelled one is an error rather than silently ignored.
func parseQuery(values url.Values, allowed ...string) (query, error) {
	q, err := parseQueryValues(values, allowed...)
	if err == nil && q.stale && q.consistent {
		return q, inputError("stale", "a read is either consistent or stale, not both")
	}
	return q, err
}

// parseQueryValues is parseQuery's reading of each parameter.
func parseQueryValues(values url.Values, allowed ...string) (query, error) {
	var q query
	err := eachParam(values, allowed, func(k, v string) error {
		var err error
		switch k {
		case "namespace":
			q.namespace = v
		case "prefix":
			q.prefix = v
		case "version":
			q.version = v
		case "type":
			q.typ = v
		case "consistent":
			q.consistent, err = parseFlag(k, v)
		case "stale":
			q.stale, err = parseFlag(k, v)
		case "watch":
			q.watch, err = parseFlag(k, v)
		case "index":
			q.index, err = strconv.ParseUint(v, 10, 64)
			if err != nil {
				err = inputError(k, "must be a non-negative integer, got %q", v)
			}
		}
		return err
	})
	return q, err
}

// eachParam calls fn with each query parameter in name order, refusing
// one not named in allowed, or given more than once, as it comes to it.
func eachParam(values url.Values, allowed []string, fn func(name, value string) error) error {
	allow := make(map[string]bool, len(allowed))
	for _, a := range allowed {
		allow[a] = true
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !allow[k] {
			if len(allowed) == 0 {
				return inputError("query", "unknown parameter %q (this path takes none)", k)
			}
			return inputError("query", "unknown parameter %q (this path takes: %s)", k, strings.Join(allowed, ", "))
		}
		vs := values[k]
		if len(vs) > 1 {
			return inputError(k, "given %d times; give it once", len(vs))
		}
		if err := fn(k, vs[0]); err != nil {
			return err
		}
	}
	return nil
}

// parseFlag reads a boolean parameter; a bare "?watch" counts as true.
func parseFlag(name, v string) (bool, error) {
	if v == "" {
		return true, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, inputError(name, "must be 1, true, 0 or false, got %q", v)
	}
	return b, nil
}

// tokenFrom reads the caller's ACL token: X-Trellis-Token, or else
// X-Consul-Token, or else an Authorization: Bearer header.
func tokenFrom(r *http.Request) string {
	if tok := r.Header.Get("X-Trellis-Token"); tok != "" {
		return tok
	}
	// Consul's header, which its clients (the consul/api package,
	// Prometheus's consul_sd_configs) send to the catalog's
	// Consul-compatible routes.
	if tok := r.Header.Get("X-Consul-Token"); tok != "" {
		return tok
	}
	auth := r.Header.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}
