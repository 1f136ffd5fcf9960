package exec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"trellis.dev/trellis/internal/driver"
)

// defaultPath is the PATH a container gets when neither its Env nor the
// agent has one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// checkSpec rejects a Spec that cannot be run, naming the field. It looks at
// values only; whether the command and directories exist is checked by
// resolveCommand and checkDir.
func checkSpec(spec driver.Spec) error {
	if err := checkContainerName(spec.Container); err != nil {
		return err
	}
	if len(spec.Command) == 0 || spec.Command[0] == "" {
		return errors.New("command: empty (the exec driver needs a program to run)")
	}
	if spec.LogDir == "" {
		return errors.New("log_dir: empty")
	}
	if !filepath.IsAbs(spec.LogDir) {
		return fmt.Errorf("log_dir: %q is not an absolute path", spec.LogDir)
	}
	if spec.WorkingDir == "" && spec.TaskDir == "" {
		return errors.New("working_dir: empty, and there is no task_dir to default to")
	}
	if d := workingDir(spec); !filepath.IsAbs(d) {
		return fmt.Errorf("working_dir: %q is not an absolute path", d)
	}
	if spec.CPUMillis < 0 {
		return fmt.Errorf("cpu: %d millicores is negative", spec.CPUMillis)
	}
	if spec.MemoryBytes < 0 {
		return fmt.Errorf("memory: %d bytes is negative", spec.MemoryBytes)
	}
	return nil
}

// credential is the uid and gid a container's process runs as.
type credential struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// credentialOf is the spec's credential, nil when it asks for the agent's
// own; a zero User or Group alone keeps the agent's uid or gid.
func credentialOf(spec driver.Spec, agentUID, agentGID int) *credential {
	if spec.User == 0 && spec.Group == 0 {
		return nil
	}
	c := &credential{UID: uint32(agentUID), GID: uint32(agentGID)}
	if spec.User != 0 {
		c.UID = spec.User
	}
	if spec.Group != 0 {
		c.GID = spec.Group
	}
	return c
}

// sysCredential: the process gets exactly the uid and gid, with no
// supplementary groups (none of the agent's leak in).
func (c *credential) sysCredential() *syscall.Credential {
	if c == nil {
		return nil
	}
	return &syscall.Credential{Uid: c.UID, Gid: c.GID, Groups: []uint32{}}
}

// checkContainerName: the name becomes part of file names (the logs) and of
// a cgroup name, so it must be one plain path element.
func checkContainerName(name string) error {
	switch {
	case name == "":
		return errors.New("container: empty name")
	case name == "." || name == "..":
		return fmt.Errorf("container: %q is not a usable name", name)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("container: %q holds '/' or NUL", name)
	}
	return nil
}

func workingDir(spec driver.Spec) string {
	if spec.WorkingDir != "" {
		return spec.WorkingDir
	}
	return spec.TaskDir
}

// buildEnv is the container's environment: exactly env, sorted, plus the
// agent's PATH (or a default) when env sets none, so that a bare command
// name can be found. Nothing else of the agent's environment leaks in.
func buildEnv(env map[string]string, agentPath string) ([]string, error) {
	out := make([]string, 0, len(env)+1)
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("env: key %q is empty or holds '=' or NUL", k)
		}
		if strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("env: %s: value holds NUL", k)
		}
		out = append(out, k+"="+v)
	}
	if _, ok := env["PATH"]; !ok {
		if agentPath == "" {
			agentPath = defaultPath
		}
		out = append(out, "PATH="+agentPath)
	}
	sort.Strings(out)
	return out, nil
}

// envValue returns the value of key in an environment list.
func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// checkDir reports whether dir is a directory, as an error naming field.
func checkDir(field, dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: %s is not a directory", field, dir)
	}
	return nil
}

// resolveCommand finds the program to run the way a shell would, but with
// the container's PATH rather than the agent's: a name with a slash is a
// path (relative to dir), any other name is looked up in path. Relative
// entries of path are skipped, as Go's os/exec refuses them, so that a
// command never runs from wherever the agent happens to be.
func resolveCommand(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("command: %w", err)
		}
		return p, nil
	}
	var firstErr error
	for _, d := range filepath.SplitList(path) {
		if !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		// A file that is there but cannot run says more than "not found".
		if firstErr == nil && !errors.Is(err, fs.ErrNotExist) {
			firstErr = err
		}
	}
	if firstErr != nil {
		return "", fmt.Errorf("command: %q: %w", name, firstErr)
	}
	return "", fmt.Errorf("command: %q not found in PATH %q", name, path)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	switch {
	case fi.IsDir():
		return fmt.Errorf("%s is a directory", p)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", p)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable (mode %v)", p, fi.Mode().Perm())
	}
	return nil
}

// logPath is the current log file of a container's stream.
func logPath(logDir, container string, stream driver.Stream) string {
	return filepath.Join(logDir, container+"."+string(stream))
}

// openLog opens a log file for the child to append to. O_APPEND is what
// makes copy-truncate rotation work: after the rotator truncates the file,
// the child's next write lands at the new end, not at its old offset.
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("log_dir: %w", err)
	}
	return f, nil
}
