package inmem_test

import (
	"testing"

	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
	"trellis.dev/trellis/internal/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.Test(t, storagetest.Options{
		NewBackend: func(*testing.T) storage.Backend { return inmem.NewBackend() },
		NewBackendWithEventHistory: func(_ *testing.T, events int) storage.Backend {
			return inmem.NewBackend(inmem.WithEventHistory(events))
		},
	})
}
