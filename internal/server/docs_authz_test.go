package server_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/acl"
)

const (
	routesBegin = "<!-- routes:begin (generated from the server's routes: go test ./internal/server -run TestHTTPAPIDocListsEveryRoute with TRELLIS_UPDATE_DOCS=1) -->"
	routesEnd   = "<!-- routes:end -->"
)

// permissionDoc says in the docs what each permission means.
var permissionDoc = map[acl.Permission]string{
	acl.Public:         "none",
	acl.OperatorRead:   "`operator:read`",
	acl.OperatorWrite:  "`operator:write`",
	acl.NamespaceRead:  "`namespace:read` on `?namespace=`",
	acl.NamespaceWrite: "`namespace:write` on `?namespace=`",
	acl.PerResource:    "per resource, by its type (above)",
}

// The permission table of docs/http-api.md is the server's own route
// table: a route added without its line there fails here. Run with
// TRELLIS_UPDATE_DOCS=1 to rewrite it.
func TestHTTPAPIDocListsEveryRoute(t *testing.T) {
	var b strings.Builder
	b.WriteString(routesBegin + "\n")
	b.WriteString("| route | permission |\n|---|---|\n")
	for _, r := range fullServers(t, nil)[1].HTTPRoutes() {
		if !strings.Contains(r.Pattern, " ") {
			continue // a path's 404 and 405 answers: public
		}
		d, ok := permissionDoc[r.Permission]
		if !ok {
			t.Fatalf("%s: no words for permission %v", r.Pattern, r.Permission)
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", r.Pattern, d)
	}
	b.WriteString(routesEnd)
	want := b.String()

	const path = "../../docs/http-api.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(doc), routesBegin)
	end := strings.Index(string(doc), routesEnd)
	if start < 0 || end < start {
		t.Fatalf("%s has no generated route table between %q and %q", path, routesBegin, routesEnd)
	}
	got := string(doc[start : end+len(routesEnd)])
	if got == want {
		return
	}
	if os.Getenv("TRELLIS_UPDATE_DOCS") == "1" {
		updated := string(doc[:start]) + want + string(doc[end+len(routesEnd):])
		if err := os.WriteFile(path, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s's route table is out of date (rerun with TRELLIS_UPDATE_DOCS=1); want:\n%s", path, want)
}
