package component_test

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/agent/component"
	"trellis.dev/trellis/internal/markdown"
	"trellis.dev/trellis/internal/orchestrator"
)

// greeter writes a file into each task's directory before its containers
// start and removes it once they have exited: the shape of mesh-init,
// which registers the task's service instance instead.
type greeter struct{ log *slog.Logger }

func newGreeter(d component.Deps) (component.Component, error) {
	return greeter{log: d.Logger.With("component", "greeter")}, nil
}

func (greeter) Name() string { return "greeter" }

// Start has nothing long-lived to run: it waits for the agent to stop.
func (greeter) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

func (g greeter) Prestart(ctx context.Context, t component.Task) error {
	g.log.Info("greeting", "task", t.ID.GetName(), "network", t.Network.Mode)
	return os.WriteFile(filepath.Join(t.Dir, "greeting"), []byte("hello, "+t.ID.GetName()+"\n"), 0o644)
}

// Poststop may be called again after an agent restart: what is gone
// already is not an error.
func (greeter) Poststop(ctx context.Context, t component.Task) error {
	err := os.Remove(filepath.Join(t.Dir, "greeting"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// The example's hooks do what docs/architecture.md says; the agent's
// tests (internal/agent, components_test.go) hold when they are called.
func TestGreeter(t *testing.T) {
	c, err := newGreeter(component.Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	id := orchestrator.TaskID("default", "t1")
	tk := component.Task{ID: id, Definition: &pborch.TaskDefinition{Family: "web"}, Network: component.Network{Mode: "host"}, Dir: t.TempDir()}
	if err := c.Prestart(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(tk.Dir, "greeting")); err != nil || string(b) != "hello, t1\n" {
		t.Fatalf("greeting %q, %v", b, err)
	}
	for i := range 2 { // the second as after a restart that cut the first short
		if err := c.Poststop(context.Background(), tk); err != nil {
			t.Fatalf("poststop %d: %v", i, err)
		}
	}
	if _, err := os.Stat(filepath.Join(tk.Dir, "greeting")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the greeting is still there: %v", err)
	}
}

// docs/architecture.md quotes greeter as its example of a component: the
// quote must stay the code this file compiles and tests.
func TestArchitectureDocQuotesTheExample(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	quote, err := markdown.FirstCode(string(doc), "Adding an agent component", "go")
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	if !strings.Contains(string(src), quote) {
		t.Errorf("the quote in docs/architecture.md is not in example_test.go:\n%s", quote)
	}
}
