// Package testlog gives tests a logger that keeps what servers log in
// memory and prints it only when the test fails, so that passing tests are
// quiet and failing ones explain themselves. TRELLIS_TEST_LOG=1 in the
// environment prints everything at debug level as it happens instead.
package testlog

import (
	"bytes"
	"log/slog"
	"os"
	"sync"
	"testing"
)

// Logger returns a logger for t, as the package comment says.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("TRELLIS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	buf := &Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("server logs:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Buffer is a bytes.Buffer that goroutines may write concurrently.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
