package mesh

import (
	"fmt"
	"sort"
	"strings"
)

// Request is what Decide is asked about: a caller, the service it calls,
// and, for an HTTP request, what it asks for.
type Request struct {
	Source      Service // exact: the caller's namespace and service
	Destination Service // exact
	// HTTP is the request; nil asks about a connection (L4).
	HTTP *HTTPRequest
	// NoHTTP says that the destination's proxy sees no HTTP requests (the
	// destination speaks tcp): a source with L7 permissions is then denied
	// at the connection, since nothing would enforce them.
	NoHTTP bool
}

// HTTPRequest is what an L7 permission looks at.
type HTTPRequest struct {
	Path   string
	Method string
	// Header holds the request's headers; names are compared without
	// case, and several values of one name are joined with ",".
	Header map[string][]string
}

// Decision is Decide's answer.
type Decision struct {
	Allowed bool
	// ByDefault says that the default action decided: no rule names the
	// caller, or none of the permissions of the rule that does matched.
	ByDefault bool
	// Rule is the most specific rule that names the caller; nil when none
	// does.
	Rule *Rule
	// Reason says why, in a sentence.
	Reason string
}

// Rule identifies a deciding rule.
type Rule struct {
	Destination Service
	Source      Service
	// Precedence is the rule's rank, 9 (every name exact) down to 1
	// (every name "*"); see Precedence.
	Precedence int
	// Permission is the index of the L7 permission that decided, -1 when
	// the source's action did (or no permission matched: then ByDefault).
	Permission int
	// PerRequest says that the source has L7 permissions and a connection
	// was asked about: it may connect, and each of its requests is
	// decided by the permissions.
	PerRequest  bool
	Description string
}

// Precedence ranks a rule by which of its names are exact, as Consul
// does: the destination before the source, the namespace before the name.
// Every name exact is 9; an exact destination and any source of an exact
// namespace 8; an exact destination and every source 7; every service of
// an exact destination namespace with the sources the same way 6, 5, 4;
// every destination 3, 2, 1. A namespace "*" makes the name "*" too
// (a name within every namespace is not a rule Compile accepts).
func Precedence(dest, src Service) int {
	return 3*specificity(dest) + specificity(src) + 1
}

// specificity is 2 for namespace/name, 1 for namespace/*, 0 for */*.
func specificity(s Service) int {
	switch {
	case s.Namespace == Wildcard:
		return 0
	case s.Name == Wildcard:
		return 1
	}
	return 2
}

// Decide says whether req is allowed by the intentions set, def deciding
// where none does. The most specific rule naming both the caller and the
// destination decides (Precedence); between two of one rank, which only
// rules repeated across set can be, a deny wins. A source's action
// decides at once; its L7 permissions are evaluated in order, the first
// that matches deciding, and a request none matches gets def. A
// connection (req.HTTP nil) from a source with permissions is allowed,
// each request then decided by them, unless the destination speaks no
// HTTP (req.NoHTTP): then it is denied, since nothing would enforce them.
//
// Decide is pure: the same arguments give the same Decision, whatever the
// order of set and of its sources.
func Decide(req Request, set []Intentions, def Action) Decision {
	var best *Source
	var bestRule Rule
	for i := range set {
		in := &set[i]
		if !matches(in.Destination, req.Destination) {
			continue
		}
		for j := range in.Sources {
			s := &in.Sources[j]
			if !matches(s.Service, req.Source) {
				continue
			}
			p := Precedence(in.Destination, s.Service)
			if best != nil && (p < bestRule.Precedence || p == bestRule.Precedence && !beats(s, best)) {
				continue
			}
			best = s
			bestRule = Rule{Destination: in.Destination, Source: s.Service, Precedence: p, Permission: -1, Description: s.Description}
		}
	}
	if best == nil {
		return Decision{
			Allowed: def == Allow, ByDefault: true,
			Reason: fmt.Sprintf("no intention of %s names %s: the default action (%s) decides", req.Destination, req.Source, def),
		}
	}
	rule := bestRule
	if len(best.Permissions) == 0 {
		return Decision{Allowed: best.Action == Allow, Rule: &rule,
			Reason: fmt.Sprintf("the intention %s → %s says %s", rule.Source, rule.Destination, best.Action)}
	}
	if req.NoHTTP {
		return Decision{Allowed: false, Rule: &rule,
			Reason: fmt.Sprintf("the intention %s → %s has L7 permissions, which a destination that speaks no HTTP cannot enforce: denied, failing closed", rule.Source, rule.Destination)}
	}
	if req.HTTP == nil {
		rule.PerRequest = true
		return Decision{Allowed: true, Rule: &rule,
			Reason: fmt.Sprintf("the intention %s → %s has L7 permissions: %s may connect, and each request is decided by them", rule.Source, rule.Destination, req.Source)}
	}
	for k := range best.Permissions {
		p := &best.Permissions[k]
		if p.HTTP.matches(req.HTTP) {
			rule.Permission = k
			return Decision{Allowed: p.Action == Allow, Rule: &rule,
				Reason: fmt.Sprintf("permission %d of the intention %s → %s matches and says %s", k, rule.Source, rule.Destination, p.Action)}
		}
	}
	return Decision{Allowed: def == Allow, ByDefault: true, Rule: &rule,
		Reason: fmt.Sprintf("no permission of the intention %s → %s matches the request: the default action (%s) decides", rule.Source, rule.Destination, def)}
}

// beats says whether s takes the place of a rule of the same precedence
// already chosen (the same source of the same destination, repeated in
// set): a deny does, failing closed; between two of a kind the lesser in
// a fixed order of their content, so that the answer does not depend on
// which of the two came first.
func beats(s, chosen *Source) bool {
	if (s.Action == Deny) != (chosen.Action == Deny) {
		return s.Action == Deny
	}
	return s.key() < chosen.key()
}

// key writes a source's content in a fixed form, to order two sources of
// one rank.
func (s *Source) key() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%q", s.Action, s.Description)
	for _, p := range s.Permissions {
		m := p.HTTP
		re := ""
		if m.PathRegex != nil {
			re = m.PathRegex.String()
		}
		fmt.Fprintf(&b, "|%s %q %q %q %q", p.Action, m.PathExact, m.PathPrefix, re, m.Methods)
		for _, h := range m.Headers {
			hre := ""
			if h.Regex != nil {
				hre = h.Regex.String()
			}
			fmt.Fprintf(&b, " %q %v %q %q %q %q %v", h.Name, h.Present, h.Exact, h.Prefix, h.Suffix, hre, h.Invert)
		}
	}
	return b.String()
}

// matches says whether the pattern p (a part may be Wildcard) names s.
func matches(p, s Service) bool {
	return (p.Namespace == Wildcard || p.Namespace == s.Namespace) && (p.Name == Wildcard || p.Name == s.Name)
}

// matches says whether r satisfies every part of m.
func (m *HTTPMatch) matches(r *HTTPRequest) bool {
	switch {
	case m.PathExact != "" && r.Path != m.PathExact,
		m.PathPrefix != "" && !strings.HasPrefix(r.Path, m.PathPrefix),
		m.PathRegex != nil && !m.PathRegex.MatchString(r.Path):
		return false
	}
	if len(m.Methods) > 0 {
		found := false
		for _, x := range m.Methods {
			if strings.EqualFold(x, r.Method) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	for i := range m.Headers {
		if !m.Headers[i].matches(r.Header) {
			return false
		}
	}
	return true
}

func (h *HeaderMatch) matches(header map[string][]string) bool {
	var names []string
	for k := range header {
		if strings.EqualFold(k, h.Name) {
			names = append(names, k)
		}
	}
	present := len(names) > 0
	sort.Strings(names) // one name written in two cases: a fixed order
	var values []string
	for _, k := range names {
		values = append(values, header[k]...)
	}
	value := strings.Join(values, ",")
	var ok bool
	switch {
	case h.Present:
		ok = present
	case h.Regex != nil:
		ok = present && h.Regex.MatchString(value)
	case h.Exact != "":
		ok = present && value == h.Exact
	case h.Prefix != "":
		ok = present && strings.HasPrefix(value, h.Prefix)
	case h.Suffix != "":
		ok = present && strings.HasSuffix(value, h.Suffix)
	}
	return ok != h.Invert
}
