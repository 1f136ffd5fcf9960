package test

import (
	"os"
	"sync"
	"testing"

	"trellis.dev/trellis/internal/testcluster"
)

// The trellis binary the tests run is built once per run of the package,
// into a directory of its own that TestMain removes: every test runs the
// same program, and each build links it again (seconds on a loaded 2-core
// machine, eight times over).
var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// trellisBinary returns the path of the binary built from this tree.
func trellisBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		binary.dir, binary.err = os.MkdirTemp("", "trellis-test-bin")
		if binary.err == nil {
			// The mesh tasks' proxies run this binary as uid 1337.
			binary.err = os.Chmod(binary.dir, 0o755)
		}
		if binary.err == nil {
			binary.path, binary.err = testcluster.Build(binary.dir)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary.dir != "" {
		os.RemoveAll(binary.dir)
	}
	os.Exit(code)
}
