package httpapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Routes() can list every route only if nothing registers one on the mux
// but handle, which records it with its permission.
func TestOnlyHandleRegistersRoutes(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "mux.Handle") {
				count++
				if f != "handler.go" {
					t.Errorf("%s registers a route on the mux directly: %s", f, strings.TrimSpace(line))
				}
			}
		}
	}
	if count != 1 {
		t.Errorf("mux.Handle appears %d times; only handle should call it", count)
	}
}
