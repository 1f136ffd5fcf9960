package server

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/resource"
)

// A server refuses to run types whose status key names a controller it
// does not run.
func TestCheckStatusOwners(t *testing.T) {
	typ := &pbresource.Type{Group: "demo", GroupVersion: "v1", Kind: "Widget"}
	reg := func(owner resource.StatusOwner) []resource.Registration {
		return []resource.Registration{{Type: typ, Statuses: map[string]resource.StatusPayload{"progress": {Owner: owner, Proto: &wrapperspb.Int64Value{}}}}}
	}
	agent := func(*pbresource.Resource) (string, error) { return "", nil }
	for _, tc := range []struct {
		name  string
		types []resource.Registration
		want  string
	}{
		{"owned by a running controller", reg(resource.StatusOwner{Controller: "reporter"}), ""},
		{"owned by an agent", reg(resource.StatusOwner{AgentOf: agent}), ""},
		{"no keys", []resource.Registration{{Type: typ}}, ""},
		{"owned by a controller not running", reg(resource.StatusOwner{Controller: "reportr"}), `status key "progress" of demo/v1/Widget is owned by the controller "reportr", which this server does not run`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkStatusOwners(tc.types, map[string]bool{"reporter": true})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("checkStatusOwners = %v, want %q", err, tc.want)
			}
		})
	}
}

// The server's default modules run the controller of every status key
// their types give to one.
func TestDefaultModulesRunEveryStatusKeyOwner(t *testing.T) {
	srv, err := New(Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.closeListeners()
	running := map[string]bool{}
	for _, c := range srv.controllers {
		running[c.Name] = true
	}
	if err := checkStatusOwners(srv.registry.Types(), running); err != nil {
		t.Fatal(err)
	}
	owned := 0
	for _, reg := range srv.registry.Types() {
		for _, decl := range reg.Statuses {
			if decl.Owner.Controller != "" {
				owned++
			}
		}
	}
	if owned < 3 {
		t.Fatalf("%d status keys owned by controllers; the default modules declare at least 3", owned)
	}
}
