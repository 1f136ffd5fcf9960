//go:build linux

package exec_test

import (
	"os"
	"testing"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/driver/exec"
)

// TestUserAndGroup: a container with User and Group runs with exactly that
// uid and gid and no supplementary groups, and so do the commands Exec runs
// for it; zero keeps the agent's own.
func TestUserAndGroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("setting a process's uid needs root")
	}
	d := newDriver(t, exec.Config{})
	for _, tc := range []struct {
		name        string
		user, group uint32
		want        string
	}{
		{"the agent's own", 0, 0, "0 0 0\n"},
		{"user and group", 1337, 1337, "1337 1337 1337\n"},
		{"user alone keeps the agent's gid", 1337, 0, "1337 0 0\n"},
		{"group alone keeps the agent's uid", 0, 4242, "0 4242 4242\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// id -G lists the effective gid and the supplementary groups.
			spec := testSpec(t, "sh", "-c", `echo "$(id -u) $(id -g) $(id -G)"; sleep 1000`)
			// t.TempDir is private to root; the process needs a directory
			// it can enter.
			spec.WorkingDir = "/"
			spec.User, spec.Group = tc.user, tc.group
			h := start(t, d, spec)
			waitForLog(t, d, h, spec, tc.want)
			code, out, err := d.Exec(ctxFor(t), h, []string{"sh", "-c", `echo "$(id -u) $(id -g) $(id -G)"`})
			if err != nil || code != 0 || string(out) != tc.want {
				t.Errorf("Exec id = %d, %q, %v; want %q", code, out, err, tc.want)
			}
		})
	}
}

// waitForLog waits until the container's stdout is want.
func waitForLog(t *testing.T, d *exec.Driver, h driver.Handle, spec driver.Spec, want string) {
	t.Helper()
	// The process writes one line; follow the stream until it is there.
	r, err := d.Logs(ctxFor(t), h, spec, driver.Stdout, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 0, 64)
	chunk := make([]byte, 64)
	for len(buf) < len(want) {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if err != nil {
			break
		}
	}
	if string(buf) != want {
		t.Fatalf("stdout = %q, want %q", buf, want)
	}
}
