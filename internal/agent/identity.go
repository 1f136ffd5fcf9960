package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"trellis.dev/trellis/internal/atomicfile"
)

// identityFile holds the agent's identity in its data dir.
const identityFile = "agent-id"

// Identity is the identity of the agent whose data dir is dataDir: a random
// id made on the first call and kept in the data dir. It is what the
// agent's docker containers are labelled with (beside the cluster), so
// that it adopts and sweeps only its own: stable across the agent's
// restarts on the same data dir, and distinct between agents that share a
// Docker engine under the same instance name (two `trellis dev` runs, two
// clusters). The data dir is created when missing.
func Identity(dataDir string) (string, error) {
	path := filepath.Join(dataDir, identityFile)
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("-data-dir: agent identity: %w", err)
	}
	var r [8]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(r[:])
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("-data-dir: %w", err)
	}
	if err := atomicfile.Write(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("-data-dir: agent identity: %w", err)
	}
	return id, nil
}
