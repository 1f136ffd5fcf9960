package main

import (
	"strings"
	"testing"
)

const permissionsSpec = `description: read-only
permissions:
  - action: deny
    http: {path_prefix: /admin}
  - action: allow
    http: {path_regex: "/v1/items/[0-9]+", methods: [get]}
`

// trellis intention against a real dev: the default decides until a rule
// names the caller, the most specific rule decides and is named, L7
// permissions decide per request, a denial exits 1, and bad input is
// refused by field with nothing written.
func TestIntentionCommands(t *testing.T) {
	addr := startDev(t, "-instances", "0")
	expect := expecter(t, addr)
	waitFor(t, "the leader created the MeshConfig", func() bool {
		code, _, _ := run(t, "", map[string]string{"TRELLIS_ADDR": addr}, "intention", "check", "web", "api")
		return code == 0
	})
	expect(0, "", "Decided by: the default action (allow): no intention names default/web", "intention", "check", "web", "api")

	expect(0, "", "Created: default/web → default/api (allow)", "intention", "create", "web", "api", "--action", "allow")
	expect(0, "", "Created: default/* → default/api (deny)", "intention", "create", "*", "api", "--action", "deny")
	expect(0, permissionsSpec, "Created: default/admin → default/api (L7, 2 permissions)", "intention", "create", "admin", "api", "-f", "-")

	expect(0, "", "Decided by: the intention default/web → default/api (precedence 9)", "intention", "check", "web", "api")
	expect(1, "", "Decided by: the intention default/* → default/api (precedence 8)", "intention", "check", "db", "api")
	expect(0, "", "Decided by: permission 1 of the intention default/admin → default/api", "intention", "check", "admin", "api", "--path", "/v1/items/7", "--method", "GET")
	expect(1, "", "Decided by: permission 0 of the intention default/admin → default/api", "intention", "check", "admin", "api", "--path", "/admin")
	expect(0, "", `"by_default": true`, "intention", "check", "admin", "api", "--path", "/v1/items/7", "--method", "POST", "-o", "json")
	expect(0, "", "may connect, and each request is decided by them", "intention", "check", "admin", "api")

	list := expect(0, "", "default/api   default/web", "intention", "list")
	if strings.Index(list, "default/*") < strings.Index(list, "default/admin") {
		t.Errorf("list does not put the most specific first:\n%s", list)
	}
	expect(0, "", "1. allow path matching /v1/items/[0-9]+, methods GET", "intention", "get", "admin", "api")

	// Bad input, each refused naming what is wrong; nothing changes.
	before := expect(0, "", "", "intention", "list", "-o", "json")
	expect(1, "", "already has a rule for default/web (allow): give --replace", "intention", "create", "web", "api", "--action", "deny")
	expect(1, "", `data.sources[3].namespace: namespace "nope" does not exist`, "intention", "create", "web", "api", "--action", "deny", "--source-namespace", "nope")
	expect(2, "", `DST "*": a rule for every destination is the mesh's default action`, "intention", "create", "web", "*", "--action", "deny")
	expect(2, "", "give --action allow|deny, or -f with L7 permissions", "intention", "create", "web", "api")
	expect(2, "", `--action: "perhaps" is not an action`, "intention", "create", "x", "api", "--action", "perhaps")
	expect(1, "permissions:\n  - {action: allow, http: {path_regex: \"(\"}}\n", `stdin: permissions[0].http.path_regex: "(" is not an RE2 regular expression`, "intention", "create", "x", "api", "-f", "-")
	expect(1, "permissions:\n  - {action: allow, http: {methods: [FETCH]}}\n", `permissions[0].http.methods[0]: "FETCH" is not an HTTP method`, "intention", "create", "x", "api", "-f", "-")
	// L7 permissions need a destination that speaks HTTP: db's catalog
	// Service says tcp; web's says http.
	expect(0, "{type: catalog/v1/Service, name: db, data: {protocol: tcp}}", "applied", "resource", "apply", "-f", "-")
	expect(1, permissionsSpec, "data.sources[0].permissions: default/db speaks protocol tcp (its catalog/v1/Service says so): L7 permissions need a destination that speaks HTTP", "intention", "create", "admin", "db", "-f", "-")
	// A write that skips the mesh's operations (and their checks) is
	// refused, pointing at them; so is a delete.
	expect(1, `{type: mesh/v1/Intentions, name: api, data: {sources: [{name: web, action: allow}]}}`,
		"PUT /v1/intentions/{destination} (trellis intention create)", "resource", "apply", "-f", "-")
	expect(1, "", "DELETE /v1/intentions/{destination} (trellis intention delete)", "resource", "delete", "mesh/v1/Intentions", "api")
	if after := expect(0, "", "", "intention", "list", "-o", "json"); after != before {
		t.Errorf("refused writes changed the intentions:\nbefore: %s\nafter: %s", before, after)
	}

	// L7 permissions given before the destination turned tcp are not
	// enforced at a connection: check denies it, failing closed.
	expect(0, permissionsSpec, "Created: default/admin → default/search (L7, 2 permissions)", "intention", "create", "admin", "search", "-f", "-")
	expect(0, "", "may connect, and each request is decided by them", "intention", "check", "admin", "search")
	expect(0, "{type: catalog/v1/Service, name: search, data: {protocol: tcp}}", "applied", "resource", "apply", "-f", "-")
	expect(1, "", "which a destination that speaks no HTTP cannot enforce: denied, failing closed", "intention", "check", "admin", "search")
	expect(2, "", "default/search speaks tcp (its catalog/v1/Service says so)", "intention", "check", "admin", "search", "--path", "/v1/items/1")
	expect(0, "", "Deleted: default/admin → default/search", "intention", "delete", "admin", "search")
	// A namespace that exists is taken; delete hands the decision down.
	expect(0, "{type: core/v1/Namespace, name: payments}", "applied", "resource", "apply", "-f", "-")
	expect(0, "", "Created: payments/billing → default/api (allow)", "intention", "create", "billing", "api", "--source-namespace", "payments", "--action", "allow")
	expect(0, "", "Deleted: default/web → default/api", "intention", "delete", "web", "api")
	expect(1, "", "Decided by: the intention default/* → default/api (precedence 8)", "intention", "check", "web", "api")
	for _, src := range [][]string{{"*"}, {"admin"}, {"billing", "--source-namespace", "payments"}} {
		expect(0, "", "Deleted:", append([]string{"intention", "delete", src[0], "api"}, src[1:]...)...)
	}
	expect(0, "", "No intentions", "intention", "list")
	expect(1, "", "default/api has no rule for default/web", "intention", "delete", "web", "api")
}
