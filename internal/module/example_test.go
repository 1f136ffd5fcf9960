package module_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbcore "trellis.dev/trellis/api/core/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/markdown"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/server"
)

var greetingType = &pbresource.Type{Group: "greeter", GroupVersion: "v1", Kind: "Greeting"}

// greeter is a whole domain: a type, a controller and a route.
type greeter struct{}

func (greeter) Name() string { return "greeter" }

func (greeter) Register(r *resource.Registry) {
	r.Register(resource.Registration{Type: greetingType, Proto: &pbcore.Namespace{}, Scope: resource.ScopeNamespace})
}

func (greeter) Setup(d module.Deps) (module.Parts, error) {
	hello := func(w http.ResponseWriter, r *http.Request) error {
		httpapi.WriteJSON(w, http.StatusOK, "hello, "+r.PathValue("name"))
		return nil
	}
	return module.Parts{
		Controllers: []controller.Controller{{Name: "greeter", ManagedType: greetingType, Reconciler: greet(d.API)}},
		Routes:      []httpapi.Route{{Pattern: "GET /v1/greetings/{name}", Permission: acl.NamespaceRead, Handler: hello}},
	}, nil
}

// A domain is added by adding its module to the server's list: the
// server registers its type, runs its controller while it leads, and
// serves its route behind the permission it declares.
func Example() {
	srv, err := server.New(server.Config{
		HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
		Modules: append(server.DefaultModules(), greeter{}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, served := srv.Registry().Resolve(greetingType)
	fmt.Println("type served:", served)
	for _, r := range srv.HTTPRoutes() {
		if r.Pattern == "GET /v1/greetings/{name}" {
			fmt.Println(r.Pattern, "needs", r.Permission)
		}
	}
	// Start runs it until the context ends; here, at once.
	ctx, stop := context.WithCancel(context.Background())
	stop()
	_ = srv.Start(ctx)
	// Output:
	// type served: true
	// GET /v1/greetings/{name} needs namespace:read
}

// greet is the greeter's reconciler: it reads the Greeting it is asked
// about, where a real one would converge the world onto it.
func greet(api resource.API) controller.Reconciler {
	return controller.ReconcileFunc(func(ctx context.Context, req controller.Request) error {
		_, err := api.Read(ctx, &pbresource.ReadRequest{Id: req.ID})
		if status.Code(err) == codes.NotFound {
			return nil // gone: nothing to converge
		}
		return err
	})
}

// docs/architecture.md quotes greeter as its example of a domain: the
// quote must stay the code this file compiles and runs.
func TestArchitectureDocQuotesTheExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	quote, err := markdown.FirstCode(string(doc), "Adding a domain", "go")
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	if !strings.Contains(string(src), quote) {
		t.Errorf("the quote in docs/architecture.md is not in example_test.go:\n%s", quote)
	}
}
