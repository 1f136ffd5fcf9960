package mesh

import (
	"fmt"
	"regexp"
	"testing"

	"pgregory.net/rapid"
)

func svc(ns, name string) Service { return Service{Namespace: ns, Name: name} }

func allowFrom(ns, name string) Source { return Source{Service: svc(ns, name), Action: Allow} }
func denyFrom(ns, name string) Source  { return Source{Service: svc(ns, name), Action: Deny} }

// TestPrecedenceTable is Consul's documented precedence table: for each
// combination of exact names and wildcards, its rank.
func TestPrecedenceTable(t *testing.T) {
	const E = "exact"
	for _, tc := range []struct {
		srcNS, srcName, dstNS, dstName string
		want                           int
	}{
		{E, E, E, E, 9},
		{E, "*", E, E, 8},
		{"*", "*", E, E, 7},
		{E, E, E, "*", 6},
		{E, "*", E, "*", 5},
		{"*", "*", E, "*", 4},
		{E, E, "*", "*", 3},
		{E, "*", "*", "*", 2},
		{"*", "*", "*", "*", 1},
	} {
		name := func(s string) string {
			if s == E {
				return "x"
			}
			return s
		}
		got := Precedence(svc(name(tc.dstNS), name(tc.dstName)), svc(name(tc.srcNS), name(tc.srcName)))
		if got != tc.want {
			t.Errorf("source %s/%s, destination %s/%s: precedence %d, want %d", tc.srcNS, tc.srcName, tc.dstNS, tc.dstName, got, tc.want)
		}
	}
}

// TestPrecedenceDecides puts one rule of every rank in one set, each
// saying the opposite of the next, and checks that taking the most
// specific rules away one by one hands the decision down the table.
func TestPrecedenceDecides(t *testing.T) {
	src, dst := svc("team", "web"), svc("prod", "api")
	// rules[i] has precedence 9-i.
	type rule struct{ dest, source Service }
	rules := []rule{
		{dst, src},
		{dst, svc("team", "*")},
		{dst, svc("*", "*")},
		{svc("prod", "*"), src},
		{svc("prod", "*"), svc("team", "*")},
		{svc("prod", "*"), svc("*", "*")},
		{svc("*", "*"), src},
		{svc("*", "*"), svc("team", "*")},
		{svc("*", "*"), svc("*", "*")},
	}
	for drop := 0; drop < len(rules); drop++ {
		var set []Intentions
		for i, r := range rules[drop:] {
			action := Allow
			if (drop+i)%2 == 1 {
				action = Deny
			}
			set = append(set, Intentions{Destination: r.dest, Sources: []Source{{Service: r.source, Action: action}}})
		}
		d := Decide(Request{Source: src, Destination: dst}, set, Deny)
		if d.Rule == nil || d.ByDefault {
			t.Fatalf("with the %d most specific rules dropped: decided by default (%s)", drop, d.Reason)
		}
		if want := 9 - drop; d.Rule.Precedence != want {
			t.Errorf("with the %d most specific rules dropped: rule of precedence %d decided, want %d", drop, d.Rule.Precedence, want)
		}
		if want := drop%2 == 0; d.Allowed != want {
			t.Errorf("with the %d most specific rules dropped: allowed %v, want %v (%s)", drop, d.Allowed, want, d.Reason)
		}
		if d.Rule.Destination != rules[drop].dest || d.Rule.Source != rules[drop].source {
			t.Errorf("with the %d most specific rules dropped: rule %s → %s decided, want %s → %s", drop, d.Rule.Source, d.Rule.Destination, rules[drop].source, rules[drop].dest)
		}
	}
}

func TestDecide(t *testing.T) {
	api := svc("default", "api")
	web := svc("default", "web")
	re := func(s string) *regexp.Regexp {
		r, err := compileRegex(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	l7 := Intentions{Destination: api, Sources: []Source{{
		Service: web,
		Permissions: []Permission{
			{Action: Deny, HTTP: HTTPMatch{PathPrefix: "/admin"}},
			{Action: Allow, HTTP: HTTPMatch{PathPrefix: "/v1/", Methods: []string{"GET", "HEAD"}}},
			{Action: Allow, HTTP: HTTPMatch{PathRegex: re(`/items/[0-9]+`), Methods: []string{"PUT"}}},
			{Action: Allow, HTTP: HTTPMatch{PathExact: "/debug", Headers: []HeaderMatch{{Name: "x-debug", Exact: "on"}}}},
			{Action: Allow, HTTP: HTTPMatch{PathExact: "/canary", Headers: []HeaderMatch{{Name: "x-canary", Present: true, Invert: true}}}},
			{Action: Allow, HTTP: HTTPMatch{PathExact: "/tenant", Headers: []HeaderMatch{{Name: "x-tenant", Regex: re(`t-[a-z]+`)}, {Name: "x-region", Suffix: "-eu"}}}},
			{Action: Allow, HTTP: HTTPMatch{PathExact: "/agent", Headers: []HeaderMatch{{Name: "user-agent", Prefix: "curl/"}}}},
		},
	}}}
	get := func(path string) *HTTPRequest { return &HTTPRequest{Path: path, Method: "GET"} }
	for _, tc := range []struct {
		name       string
		req        Request
		set        []Intentions
		def        Action
		allowed    bool
		byDefault  bool
		precedence int // 0: no rule
		permission int
		perRequest bool
	}{
		{name: "no intentions, default allow", req: Request{Source: web, Destination: api}, def: Allow, allowed: true, byDefault: true},
		{name: "no intentions, default deny", req: Request{Source: web, Destination: api}, def: Deny, byDefault: true},
		{name: "an exact allow", req: Request{Source: web, Destination: api}, set: []Intentions{{Destination: api, Sources: []Source{allowFrom("default", "web")}}}, def: Deny, allowed: true, precedence: 9, permission: -1},
		{name: "an exact deny over a wildcard allow", req: Request{Source: web, Destination: api},
			set: []Intentions{{Destination: api, Sources: []Source{allowFrom("*", "*"), denyFrom("default", "web")}}}, def: Allow, precedence: 9, permission: -1},
		{name: "a namespace wildcard over every namespace", req: Request{Source: web, Destination: api},
			set: []Intentions{{Destination: api, Sources: []Source{denyFrom("*", "*"), allowFrom("default", "*")}}}, def: Deny, allowed: true, precedence: 8, permission: -1},
		{name: "a rule of another source does not apply", req: Request{Source: svc("default", "db"), Destination: api},
			set: []Intentions{{Destination: api, Sources: []Source{allowFrom("default", "web")}}}, def: Deny, byDefault: true},
		{name: "a rule of another namespace does not apply", req: Request{Source: svc("other", "web"), Destination: api},
			set: []Intentions{{Destination: api, Sources: []Source{allowFrom("default", "web")}}}, def: Deny, byDefault: true},
		{name: "a rule of another destination does not apply", req: Request{Source: web, Destination: svc("default", "db")},
			set: []Intentions{{Destination: api, Sources: []Source{allowFrom("default", "web")}}}, def: Deny, byDefault: true},
		{name: "a wildcard destination", req: Request{Source: web, Destination: svc("default", "db")},
			set: []Intentions{{Destination: svc("default", "*"), Sources: []Source{allowFrom("default", "web")}}}, def: Deny, allowed: true, precedence: 6, permission: -1},
		{name: "L7: a connection may connect", req: Request{Source: web, Destination: api}, set: []Intentions{l7}, def: Deny, allowed: true, precedence: 9, permission: -1, perRequest: true},
		{name: "L7: a destination that speaks no HTTP denies the connection", req: Request{Source: web, Destination: api, NoHTTP: true}, set: []Intentions{l7}, def: Allow, precedence: 9, permission: -1},
		{name: "L4: a destination that speaks no HTTP takes an action", req: Request{Source: web, Destination: api, NoHTTP: true},
			set: []Intentions{{Destination: api, Sources: []Source{allowFrom("default", "web")}}}, def: Deny, allowed: true, precedence: 9, permission: -1},
		{name: "L7: the first permission that matches decides (deny)", req: Request{Source: web, Destination: api, HTTP: get("/admin/users")}, set: []Intentions{l7}, def: Allow, precedence: 9, permission: 0},
		{name: "L7: prefix and method", req: Request{Source: web, Destination: api, HTTP: get("/v1/items")}, set: []Intentions{l7}, def: Deny, allowed: true, precedence: 9, permission: 1},
		{name: "L7: a method not named falls to the default", req: Request{Source: web, Destination: api, HTTP: &HTTPRequest{Path: "/v1/items", Method: "POST"}}, set: []Intentions{l7}, def: Deny, byDefault: true, precedence: 9, permission: -1},
		{name: "L7: no match falls to the default, not to a broader rule", req: Request{Source: web, Destination: api, HTTP: get("/other")},
			set: []Intentions{l7, {Destination: svc("*", "*"), Sources: []Source{allowFrom("*", "*")}}}, def: Deny, byDefault: true, precedence: 9, permission: -1},
		{name: "L7: the regex matches the whole path", req: Request{Source: web, Destination: api, HTTP: &HTTPRequest{Path: "/items/12", Method: "PUT"}}, set: []Intentions{l7}, def: Deny, allowed: true, precedence: 9, permission: 2},
		{name: "L7: a regex matching part of the path does not match", req: Request{Source: web, Destination: api, HTTP: &HTTPRequest{Path: "/items/12/x", Method: "PUT"}}, set: []Intentions{l7}, def: Deny, byDefault: true, precedence: 9, permission: -1},
		{name: "L7: an exact header, its name in another case", req: Request{Source: web, Destination: api, HTTP: &HTTPRequest{Path: "/debug", Method: "GET", Header: map[string][]string{"X-Debug": {"on"}}}}, set: []Intentions{l7}, def: Deny, allowed: true, precedence: 9, permission: 3},
		{name: "L7: an exact header of another value", req: Request{Source: web, Destination: api, HTTP: &HTTPRequest{Path: "/debug", Method: "GET", Header: map[string][]string{"x-debug": {"off"}}}}, set: []Intentions{l7}, def: Deny, byDefault: true, precedence: 9, permission: -1},
		{name: "L7: an inverted presence, absent", req: Request{Source: web, Destination: api, HTTP: get("/canary")}, set: []Intentions{l7}, def: Deny, allowed: true, precedence: 9, permission: 4},
		{name: "L7: an inverted presence, present", req: Request{Source: web, Destination: api, HTTP: &HTTPRequest{Path: "/canary", Method: "GET", Header: map[string][]string{"X-Canary": {""}}}}, set: []Intentions{l7}, def: Deny, byDefault: true, precedence: 9, permission: -1},
		{name: "L7: every header must match", req: Request{Source: web, Destination: api, HTTP: &HTTPRequest{Path: "/tenant", Method: "GET", Header: map[string][]string{"x-tenant": {"t-abc"}, "x-region": {"us"}}}}, set: []Intentions{l7}, def: Deny, byDefault: true, precedence: 9, permission: -1},
		{name: "L7: regex and suffix headers", req: Request{Source: web, Destination: api, HTTP: &HTTPRequest{Path: "/tenant", Method: "GET", Header: map[string][]string{"x-tenant": {"t-abc"}, "x-region": {"west-eu"}}}}, set: []Intentions{l7}, def: Deny, allowed: true, precedence: 9, permission: 5},
		{name: "L7: a prefix header", req: Request{Source: web, Destination: api, HTTP: &HTTPRequest{Path: "/agent", Method: "GET", Header: map[string][]string{"User-Agent": {"curl/8.5"}}}}, set: []Intentions{l7}, def: Deny, allowed: true, precedence: 9, permission: 6},
		{name: "an L4 rule decides HTTP requests too", req: Request{Source: web, Destination: api, HTTP: get("/x")},
			set: []Intentions{{Destination: api, Sources: []Source{denyFrom("default", "web")}}}, def: Allow, precedence: 9, permission: -1},
		{name: "the same rule repeated: deny wins", req: Request{Source: web, Destination: api},
			set: []Intentions{{Destination: api, Sources: []Source{allowFrom("default", "web")}}, {Destination: api, Sources: []Source{denyFrom("default", "web")}}}, def: Allow, precedence: 9, permission: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.req, tc.set, tc.def)
			if d.Allowed != tc.allowed || d.ByDefault != tc.byDefault {
				t.Fatalf("allowed %v by default %v, want %v %v (%s)", d.Allowed, d.ByDefault, tc.allowed, tc.byDefault, d.Reason)
			}
			if tc.precedence == 0 {
				if d.Rule != nil {
					t.Fatalf("rule %+v, want none", d.Rule)
				}
				return
			}
			if d.Rule == nil {
				t.Fatalf("no rule, want one of precedence %d (%s)", tc.precedence, d.Reason)
			}
			if d.Rule.Precedence != tc.precedence || d.Rule.Permission != tc.permission || d.Rule.PerRequest != tc.perRequest {
				t.Fatalf("rule %+v, want precedence %d permission %d per-request %v", d.Rule, tc.precedence, tc.permission, tc.perRequest)
			}
			if d.Reason == "" {
				t.Fatal("no reason")
			}
		})
	}
}

// TestDecideIgnoresOrder: the decision does not depend on the order the
// intentions, or the sources of one, were written in.
func TestDecideIgnoresOrder(t *testing.T) {
	names := []string{"a", "b", "*"}
	namespaces := []string{"x", "y", "*"}
	pattern := func(t *rapid.T, label string) Service {
		ns := rapid.SampledFrom(namespaces).Draw(t, label+"-ns")
		name := rapid.SampledFrom(names).Draw(t, label+"-name")
		if ns == Wildcard {
			name = Wildcard
		}
		return svc(ns, name)
	}
	exact := func(t *rapid.T, label string) Service {
		return svc(rapid.SampledFrom(namespaces[:2]).Draw(t, label+"-ns"), rapid.SampledFrom(names[:2]).Draw(t, label+"-name"))
	}
	rapid.Check(t, func(t *rapid.T) {
		// Sources unique within one destination, as Compile requires;
		// a destination may come twice (the store keeps one resource per
		// destination, but Decide does not count on it).
		var set []Intentions
		for i := rapid.IntRange(0, 6).Draw(t, "n"); i > 0; i-- {
			in := Intentions{Destination: pattern(t, "dest")}
			seenSrc := map[Service]bool{}
			for j := rapid.IntRange(1, 4).Draw(t, "sources"); j > 0; j-- {
				s := pattern(t, "src")
				if seenSrc[s] {
					continue
				}
				seenSrc[s] = true
				src := Source{Service: s}
				if rapid.Bool().Draw(t, "l7") {
					for k := rapid.IntRange(1, 3).Draw(t, "perms"); k > 0; k-- {
						src.Permissions = append(src.Permissions, Permission{
							Action: rapid.SampledFrom([]Action{Allow, Deny}).Draw(t, "perm-action"),
							HTTP:   HTTPMatch{PathPrefix: rapid.SampledFrom([]string{"/", "/a", "/b"}).Draw(t, "prefix")},
						})
					}
				} else {
					src.Action = rapid.SampledFrom([]Action{Allow, Deny}).Draw(t, "action")
				}
				in.Sources = append(in.Sources, src)
			}
			set = append(set, in)
		}
		req := Request{Source: exact(t, "req-src"), Destination: exact(t, "req-dst")}
		req.NoHTTP = rapid.Bool().Draw(t, "no-http")
		if !req.NoHTTP && rapid.Bool().Draw(t, "http") {
			req.HTTP = &HTTPRequest{Path: rapid.SampledFrom([]string{"/a/1", "/b", "/c"}).Draw(t, "path"), Method: "GET"}
		}
		def := rapid.SampledFrom([]Action{Allow, Deny}).Draw(t, "default")
		want := Decide(req, set, def)

		// The same intentions, each list permuted.
		shuffled := make([]Intentions, len(set))
		perm := rapid.Permutation(indexes(len(set))).Draw(t, "order")
		for i, p := range perm {
			in := set[p]
			srcPerm := rapid.Permutation(indexes(len(in.Sources))).Draw(t, "source-order")
			sources := make([]Source, len(in.Sources))
			for k, q := range srcPerm {
				sources[k] = in.Sources[q]
			}
			shuffled[i] = Intentions{Destination: in.Destination, Sources: sources}
		}
		got := Decide(req, shuffled, def)
		if fmt.Sprint(got.Allowed, got.ByDefault, got.Reason) != fmt.Sprint(want.Allowed, want.ByDefault, want.Reason) || (got.Rule == nil) != (want.Rule == nil) || got.Rule != nil && *got.Rule != *want.Rule {
			t.Fatalf("the order changed the decision:\nwritten: %+v %+v\nshuffled: %+v %+v", want, want.Rule, got, got.Rule)
		}
	})
}

func indexes(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
