// Package atomicfile replaces a file's contents in one step, so that a
// reader (or a restarted process) sees either the old contents or the new,
// never a part of them.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data: a temporary file beside it, renamed over
// it. It does not fsync: the rename keeps the file whole against the
// process's own crashes, not against a power loss or a kernel crash, which
// the callers' local state does not need to survive (the agent's task
// records and CNI configuration describe processes and namespaces that such
// a crash ends anyway).
func Write(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}
