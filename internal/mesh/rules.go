package mesh

import (
	"fmt"
	"regexp"
	"strings"

	pbmesh "trellis.dev/trellis/api/mesh/v1"
	"trellis.dev/trellis/internal/resource"
)

// The intentions as Decide reads them: plain values, the regular
// expressions compiled once. Compile makes them from a stored Intentions,
// and is the validation of its sources too: what does not compile is
// refused at the write, naming its field.

// Service names a service in a namespace. In a rule either part may be
// Wildcard.
type Service struct {
	Namespace string
	Name      string
}

func (s Service) String() string { return s.Namespace + "/" + s.Name }

// Intentions are the rules of one destination.
type Intentions struct {
	// Destination is the service the rules guard (a part may be Wildcard).
	Destination Service
	Sources     []Source
}

// Source is one caller's rule: an Action for the whole connection, or
// Permissions evaluated per request (then Action is "").
type Source struct {
	Service     Service
	Action      Action
	Permissions []Permission
	Description string
}

// Permission is an L7 rule: Action applies to a request that matches
// HTTP.
type Permission struct {
	Action Action
	HTTP   HTTPMatch
}

// HTTPMatch matches a request: each part given must hold.
type HTTPMatch struct {
	PathExact  string
	PathPrefix string
	PathRegex  *regexp.Regexp // nil: no regex
	Methods    []string       // upper case; empty: every method
	Headers    []HeaderMatch
}

// HeaderMatch matches one header, by its name without case. Exactly one
// of Present, Exact, Prefix, Suffix and Regex is set.
type HeaderMatch struct {
	Name    string // lower case
	Present bool
	Exact   string
	Prefix  string
	Suffix  string
	Regex   *regexp.Regexp
	Invert  bool
}

// Methods are the HTTP methods a permission may name.
var Methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE"}

// Compile turns the stored Intentions of the destination dest into the
// rules Decide reads, checking every source on the way. Its errors are
// resource.FieldErrors whose field is a path in the data
// ("sources[1].permissions[0].http.path_regex"). A source with an empty
// namespace is in dest's namespace.
func Compile(dest Service, in *pbmesh.Intentions) (Intentions, error) {
	out := Intentions{Destination: dest}
	if len(in.GetSources()) == 0 {
		return out, resource.NewFieldError("sources", "is empty: name at least one source (delete the Intentions to remove the last)")
	}
	seen := make(map[Service]int, len(in.GetSources()))
	for i, s := range in.GetSources() {
		field := fmt.Sprintf("sources[%d]", i)
		src, err := compileSource(dest.Namespace, s)
		if err != nil {
			return out, prefixed(field, err)
		}
		if j, dup := seen[src.Service]; dup {
			return out, resource.NewFieldError(field, "names %s again (sources[%d] does): give each source once, its rules together", src.Service, j)
		}
		seen[src.Service] = i
		out.Sources = append(out.Sources, src)
	}
	return out, nil
}

func compileSource(destNamespace string, s *pbmesh.IntentionSource) (Source, error) {
	ns := s.GetNamespace()
	if ns == "" {
		ns = destNamespace
	}
	src := Source{Service: Service{Namespace: ns, Name: s.GetName()}, Description: s.GetDescription()}
	if err := checkPattern("name", s.GetName(), "a service name"); err != nil {
		return src, err
	}
	if err := checkPattern("namespace", ns, "a namespace"); err != nil {
		return src, err
	}
	if ns == Wildcard && s.GetName() != Wildcard {
		return src, resource.NewFieldError("name", "%q in every namespace (namespace \"*\") is not a source: a service is named within one namespace; give that namespace, or name \"*\"", s.GetName())
	}
	hasAction, hasPerms := s.GetAction() != "", len(s.GetPermissions()) > 0
	switch {
	case hasAction && hasPerms:
		return src, resource.NewFieldError("action", "is given with permissions: a source is decided by an action for the whole connection or by L7 permissions per request, not both; drop one")
	case !hasAction && !hasPerms:
		return src, resource.NewFieldError("action", "is required: give \"allow\" or \"deny\", or L7 permissions instead")
	case hasAction:
		a, err := parseAction("action", s.GetAction())
		if err != nil {
			return src, err
		}
		src.Action = a
	}
	for i, p := range s.GetPermissions() {
		perm, err := compilePermission(p)
		if err != nil {
			return src, prefixed(fmt.Sprintf("permissions[%d]", i), err)
		}
		src.Permissions = append(src.Permissions, perm)
	}
	return src, nil
}

func compilePermission(p *pbmesh.IntentionPermission) (Permission, error) {
	a, err := parseAction("action", p.GetAction())
	if err != nil {
		return Permission{}, err
	}
	h := p.GetHttp()
	if h == nil {
		return Permission{}, resource.NewFieldError("http", "is required: the request a permission applies to (a path, methods, headers)")
	}
	m, err := compileHTTP(h)
	if err != nil {
		return Permission{}, prefixed("http", err)
	}
	return Permission{Action: a, HTTP: m}, nil
}

func compileHTTP(h *pbmesh.IntentionHTTPMatch) (HTTPMatch, error) {
	m := HTTPMatch{PathExact: h.GetPathExact(), PathPrefix: h.GetPathPrefix()}
	paths := 0
	for _, p := range []string{h.GetPathExact(), h.GetPathPrefix(), h.GetPathRegex()} {
		if p != "" {
			paths++
		}
	}
	if paths > 1 {
		return m, resource.NewFieldError("path_exact", "path_exact, path_prefix and path_regex are alternatives: give one of them")
	}
	for _, f := range []struct{ name, v string }{{"path_exact", h.GetPathExact()}, {"path_prefix", h.GetPathPrefix()}} {
		if f.v != "" && !strings.HasPrefix(f.v, "/") {
			return m, resource.NewFieldError(f.name, "%q does not begin with \"/\": a request's path always does", f.v)
		}
	}
	if r := h.GetPathRegex(); r != "" {
		re, err := compileRegex(r)
		if err != nil {
			return m, resource.NewFieldError("path_regex", "%q is not an RE2 regular expression: %v", r, err)
		}
		m.PathRegex = re
	}
	seen := map[string]bool{}
	for i, method := range h.GetMethods() {
		up := strings.ToUpper(method)
		if !isMethod(up) {
			return m, resource.NewFieldError(fmt.Sprintf("methods[%d]", i), "%q is not an HTTP method: give one of %s", method, strings.Join(Methods, ", "))
		}
		if seen[up] {
			return m, resource.NewFieldError(fmt.Sprintf("methods[%d]", i), "%s is named twice", up)
		}
		seen[up] = true
		m.Methods = append(m.Methods, up)
	}
	for i, hm := range h.GetHeaders() {
		c, err := compileHeader(hm)
		if err != nil {
			return m, prefixed(fmt.Sprintf("headers[%d]", i), err)
		}
		m.Headers = append(m.Headers, c)
	}
	if paths == 0 && len(m.Methods) == 0 && len(m.Headers) == 0 {
		return m, resource.NewFieldError("", "matches every request: give a path, methods or headers (a source's action says \"every request\")")
	}
	return m, nil
}

func compileHeader(h *pbmesh.IntentionHeaderMatch) (HeaderMatch, error) {
	c := HeaderMatch{Name: strings.ToLower(h.GetName()), Present: h.GetPresent(), Exact: h.GetExact(), Prefix: h.GetPrefix(), Suffix: h.GetSuffix(), Invert: h.GetInvert()}
	if h.GetName() == "" {
		return c, resource.NewFieldError("name", "is required: the header to match")
	}
	if !isToken(h.GetName()) {
		return c, resource.NewFieldError("name", "%q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", h.GetName())
	}
	kinds := 0
	if h.GetPresent() {
		kinds++
	}
	for _, v := range []string{h.GetExact(), h.GetPrefix(), h.GetSuffix(), h.GetRegex()} {
		if v != "" {
			kinds++
		}
	}
	if kinds != 1 {
		return c, resource.NewFieldError("", "gives %d of present, exact, prefix, suffix and regex: give exactly one", kinds)
	}
	if r := h.GetRegex(); r != "" {
		re, err := compileRegex(r)
		if err != nil {
			return c, resource.NewFieldError("regex", "%q is not an RE2 regular expression: %v", r, err)
		}
		c.Regex = re
	}
	return c, nil
}

// compileRegex compiles an RE2 expression to match a whole string, as
// Envoy's safe_regex does.
func compileRegex(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}

func parseAction(field, s string) (Action, error) {
	switch a := Action(s); a {
	case Allow, Deny:
		return a, nil
	}
	return "", resource.NewFieldError(field, "%q is not an action: give \"allow\" or \"deny\"", s)
}

// checkPattern checks a source's name or namespace: Wildcard or a name.
func checkPattern(field, v, what string) error {
	if v == Wildcard {
		return nil
	}
	if v == "" {
		return resource.NewFieldError(field, "is required: %s, or \"*\" for every one", what)
	}
	if !resource.IsDNSLabel(v) {
		return resource.NewFieldError(field, "%q is not %s nor \"*\": a lowercase DNS label (a-z, 0-9, '-', at most 63 characters)", v, what)
	}
	return nil
}

func isMethod(m string) bool {
	for _, x := range Methods {
		if x == m {
			return true
		}
	}
	return false
}

// isToken reports whether s is an HTTP token (RFC 9110), what a header
// name is.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return s != ""
}

// prefixed re-roots a FieldError under prefix.
func prefixed(prefix string, err error) error {
	fe, ok := err.(*resource.FieldError)
	if !ok {
		return err
	}
	switch {
	case fe.Field == "":
		return resource.NewFieldError(prefix, "%s", fe.Reason)
	case strings.HasPrefix(fe.Field, "["):
		return resource.NewFieldError(prefix+fe.Field, "%s", fe.Reason)
	}
	return resource.NewFieldError(prefix+"."+fe.Field, "%s", fe.Reason)
}
