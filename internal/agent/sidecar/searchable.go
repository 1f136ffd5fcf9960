package sidecar

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Searchable adds the search bit for others (o+x, never o+r) to root and
// every directory below it down to dir, so that the proxy, which runs as
// UID, can open the socket the agent serves in dir by its path without
// being able to list anything on the way. The agent's data dir and task
// directories are 0700 otherwise. dir must be root or below it. root's own
// parents are not changed: one that others cannot search is an error
// naming it, as the proxy could never reach its socket.
func Searchable(root, dir string) error {
	root, dir = filepath.Clean(root), filepath.Clean(dir)
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return fmt.Errorf("task directory %s is not under the data dir %s", dir, root)
	}
	p := root
	steps := []string{p}
	if rel != "." {
		for _, part := range strings.Split(rel, string(filepath.Separator)) {
			p = filepath.Join(p, part)
			steps = append(steps, p)
		}
	}
	for a := filepath.Dir(root); ; a = filepath.Dir(a) {
		fi, err := os.Stat(a)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (a parent of the data dir %s) is not searchable by others (mode %v): the proxy, uid %d, could not reach its socket; chmod o+x it or use another data dir", a, root, fi.Mode().Perm(), UID)
		}
		if a == filepath.Dir(a) {
			break
		}
	}
	for _, d := range steps {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", d)
		}
		if m := fi.Mode().Perm(); m&0o001 == 0 {
			if err := os.Chmod(d, m|0o001); err != nil {
				return err
			}
		}
	}
	return nil
}

// CheckExecutable says whether the proxy's user can run the program at
// path: the file executable by others, and every directory above it
// searchable by them. The error names what is in the way.
func CheckExecutable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o001 == 0 {
		return fmt.Errorf("%s is not executable by others (mode %v): the proxy runs it as uid %d", path, fi.Mode().Perm(), UID)
	}
	for d := filepath.Dir(filepath.Clean(path)); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (above %s) is not searchable by others (mode %v): the proxy runs %s as uid %d", d, path, fi.Mode().Perm(), path, UID)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
