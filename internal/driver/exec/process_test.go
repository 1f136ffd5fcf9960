//go:build linux

package exec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/driver/exec"
)

func TestExitCodes(t *testing.T) {
	d := newDriver(t, exec.Config{})
	cases := []struct {
		script string
		want   driver.Exit
	}{
		{"exit 0", driver.Exit{Code: 0}},
		{"exit 3", driver.Exit{Code: 3}},
		{"kill -TERM $$", driver.Exit{Code: 128 + 15, Signal: syscall.SIGTERM}},
		{"kill -KILL $$", driver.Exit{Code: 128 + 9, Signal: syscall.SIGKILL}},
	}
	for _, tc := range cases {
		t.Run(tc.script, func(t *testing.T) {
			h := start(t, d, testSpec(t, "sh", "-c", tc.script))
			if h.Driver != "exec" || h.ID == "" || h.StartedAt.IsZero() || len(h.State) == 0 {
				t.Errorf("handle = %+v, want driver exec, a pid, a start time and state", h)
			}
			if got := wait(t, d, h); got != tc.want {
				t.Errorf("exit = %+v, want %+v", got, tc.want)
			}
			// Waiting again tells the same.
			if got := wait(t, d, h); got != tc.want {
				t.Errorf("second Wait = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	d := newDriver(t, exec.Config{})
	h := start(t, d, testSpec(t, "sleep", "1000"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Wait(ctx, h); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with an ended context = %v, want context.Canceled", err)
	}
	// The container keeps running: a signal ends it, and Wait says so.
	if err := d.Signal(ctxFor(t), h, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, d, h); got.Signal != syscall.SIGTERM {
		t.Fatalf("exit = %+v, want SIGTERM", got)
	}
}

// A signal reaches the whole process group: the shell and the sleep it
// started in the background.
func TestSignalReachesProcessGroup(t *testing.T) {
	d := newDriver(t, exec.Config{})
	spec := testSpec(t, "sh", "-c", "sleep 1000 & echo $! > child; wait")
	h := start(t, d, spec)
	_, child := readPid(t, filepath.Join(spec.TaskDir, "child"))

	if err := d.Signal(ctxFor(t), h, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, d, h); got.Signal != syscall.SIGTERM || got.Code != 143 {
		t.Errorf("exit = %+v, want SIGTERM, code 143", got)
	}
	if !exitedWithin(child, deadline) {
		t.Fatal("the shell's child did not get the signal")
	}
	// Signalling what has exited is not an error.
	if err := d.Signal(ctxFor(t), h, syscall.SIGTERM); err != nil {
		t.Fatalf("Signal after exit: %v", err)
	}
}

func TestEnvIsExactlyTheSpecs(t *testing.T) {
	t.Setenv("TRELLIS_EXEC_TEST_LEAK", "from the agent")
	d := newDriver(t, exec.Config{})

	t.Run("agent PATH added", func(t *testing.T) {
		spec := testSpec(t, "env")
		spec.Env = map[string]string{"FOO": "bar", "EMPTY": "", "SPACED": "a b"}
		h := start(t, d, spec)
		if got := wait(t, d, h); got.Code != 0 {
			t.Fatalf("exit = %+v", got)
		}
		want := []string{"EMPTY=", "FOO=bar", "PATH=" + os.Getenv("PATH"), "SPACED=a b"}
		if got := lines(readLogs(t, d, h, spec, driver.Stdout)); !equal(sorted(got), want) {
			t.Errorf("env = %q, want %q", got, want)
		}
	})
	t.Run("own PATH kept", func(t *testing.T) {
		spec := testSpec(t, "env")
		spec.Env = map[string]string{"PATH": "/usr/bin:/bin"}
		h := start(t, d, spec)
		wait(t, d, h)
		want := []string{"PATH=/usr/bin:/bin"}
		if got := lines(readLogs(t, d, h, spec, driver.Stdout)); !equal(got, want) {
			t.Errorf("env = %q, want %q", got, want)
		}
	})
	t.Run("command found in the container's PATH, not the agent's", func(t *testing.T) {
		spec := testSpec(t, "mytool")
		bin := filepath.Join(spec.TaskDir, "bin")
		if err := os.Mkdir(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, "mytool"), []byte("#!/bin/sh\necho tool ran\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		spec.Env = map[string]string{"PATH": bin + ":/usr/bin:/bin"}
		h := start(t, d, spec)
		wait(t, d, h)
		if got := readLogs(t, d, h, spec, driver.Stdout); got != "tool ran\n" {
			t.Errorf("stdout = %q", got)
		}
	})
}

func TestWorkingDir(t *testing.T) {
	d := newDriver(t, exec.Config{})
	t.Run("task dir by default", func(t *testing.T) {
		spec := testSpec(t, "pwd")
		h := start(t, d, spec)
		wait(t, d, h)
		if got := readLogs(t, d, h, spec, driver.Stdout); got != spec.TaskDir+"\n" {
			t.Errorf("pwd = %q, want %q", got, spec.TaskDir)
		}
	})
	t.Run("working dir wins", func(t *testing.T) {
		spec := testSpec(t, "pwd")
		spec.WorkingDir = t.TempDir()
		h := start(t, d, spec)
		wait(t, d, h)
		if got := readLogs(t, d, h, spec, driver.Stdout); got != spec.WorkingDir+"\n" {
			t.Errorf("pwd = %q, want %q", got, spec.WorkingDir)
		}
	})
	t.Run("relative command runs from the working dir", func(t *testing.T) {
		spec := testSpec(t, "./run.sh")
		if err := os.WriteFile(filepath.Join(spec.TaskDir, "run.sh"), []byte("#!/bin/sh\necho here\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		h := start(t, d, spec)
		wait(t, d, h)
		if got := readLogs(t, d, h, spec, driver.Stdout); got != "here\n" {
			t.Errorf("stdout = %q", got)
		}
	})
}

func TestStdoutAndStderr(t *testing.T) {
	d := newDriver(t, exec.Config{})
	spec := testSpec(t, "sh", "-c", "echo out; echo err >&2; echo out2")
	h := start(t, d, spec)
	wait(t, d, h)
	if got := readLogs(t, d, h, spec, driver.Stdout); got != "out\nout2\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := readLogs(t, d, h, spec, driver.Stderr); got != "err\n" {
		t.Errorf("stderr = %q", got)
	}
	// The files are where the contract says.
	if _, err := os.Stat(filepath.Join(spec.LogDir, "app.stdout")); err != nil {
		t.Error(err)
	}
	// A restarted container appends to the same files.
	h2 := start(t, d, spec)
	wait(t, d, h2)
	if got := readLogs(t, d, h2, spec, driver.Stdout); got != "out\nout2\nout\nout2\n" {
		t.Errorf("stdout after a restart = %q", got)
	}
}

func TestStartFailures(t *testing.T) {
	d := newDriver(t, exec.Config{})
	cases := []struct {
		name  string
		edit  func(t *testing.T, s *driver.Spec)
		wants []string
	}{
		{"not found", func(t *testing.T, s *driver.Spec) { s.Command = []string{"no-such-command-here"} },
			[]string{"command:", `"no-such-command-here" not found in PATH`}},
		{"missing path", func(t *testing.T, s *driver.Spec) { s.Command = []string{"/no/such/program"} },
			[]string{"command:", "/no/such/program", "no such file or directory"}},
		{"not executable", func(t *testing.T, s *driver.Spec) {
			p := filepath.Join(s.TaskDir, "script")
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s.Command = []string{p}
		}, []string{"command:", "is not executable"}},
		{"not executable in PATH", func(t *testing.T, s *driver.Spec) {
			if err := os.WriteFile(filepath.Join(s.TaskDir, "tool"), []byte("#!/bin/sh\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			s.Env = map[string]string{"PATH": s.TaskDir}
			s.Command = []string{"tool"}
		}, []string{"command:", `"tool"`, "is not executable"}},
		{"a directory", func(t *testing.T, s *driver.Spec) { s.Command = []string{s.TaskDir} },
			[]string{"command:", "is a directory"}},
		{"not a program", func(t *testing.T, s *driver.Spec) {
			p := filepath.Join(s.TaskDir, "garbage")
			if err := os.WriteFile(p, []byte("\x00\x01\x02 not a program"), 0o755); err != nil {
				t.Fatal(err)
			}
			s.Command = []string{p}
		}, []string{"command: start", "exec format error"}},
		{"empty command", func(t *testing.T, s *driver.Spec) { s.Command = nil },
			[]string{"command: empty"}},
		{"missing working dir", func(t *testing.T, s *driver.Spec) { s.WorkingDir = "/no/such/dir" },
			[]string{"working_dir:", "/no/such/dir", "no such file or directory"}},
		{"working dir is a file", func(t *testing.T, s *driver.Spec) {
			p := filepath.Join(s.TaskDir, "file")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			s.WorkingDir = p
		}, []string{"working_dir:", "is not a directory"}},
		{"missing task dir", func(t *testing.T, s *driver.Spec) { s.TaskDir = "/no/such/task" },
			[]string{"task_dir:", "no such file or directory"}},
		{"relative working dir", func(t *testing.T, s *driver.Spec) { s.WorkingDir = "rel" },
			[]string{"working_dir:", "not an absolute path"}},
		{"no log dir", func(t *testing.T, s *driver.Spec) { s.LogDir = "" },
			[]string{"log_dir: empty"}},
		{"bad container name", func(t *testing.T, s *driver.Spec) { s.Container = "a/b" },
			[]string{"container:", `"a/b"`}},
		{"bad env key", func(t *testing.T, s *driver.Spec) { s.Env = map[string]string{"A=B": "x"} },
			[]string{"env:", `"A=B"`}},
		{"negative memory", func(t *testing.T, s *driver.Spec) { s.MemoryBytes = -1 },
			[]string{"memory:", "negative"}},
		{"negative cpu", func(t *testing.T, s *driver.Spec) { s.CPUMillis = -5 },
			[]string{"cpu:", "negative"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := testSpec(t, "true")
			tc.edit(t, &spec)
			h, err := d.Start(ctxFor(t), spec)
			if err == nil {
				cleanup(t, d, h)
				t.Fatalf("Start succeeded, want an error")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestExec(t *testing.T) {
	d := newDriver(t, exec.Config{})
	spec := testSpec(t, "sleep", "1000")
	spec.Env = map[string]string{"FOO": "bar"}
	h := start(t, d, spec)

	t.Run("env, dir and exit code", func(t *testing.T) {
		code, out, err := d.Exec(ctxFor(t), h, []string{"sh", "-c", `echo "$FOO"; pwd; echo oops >&2; exit 4`})
		if err != nil {
			t.Fatal(err)
		}
		if code != 4 || string(out) != "bar\n"+spec.TaskDir+"\noops\n" {
			t.Errorf("Exec = %d, %q", code, out)
		}
	})
	t.Run("killed by a signal", func(t *testing.T) {
		code, _, err := d.Exec(ctxFor(t), h, []string{"sh", "-c", "kill -KILL $$"})
		if err != nil || code != 137 {
			t.Errorf("Exec = %d, %v; want 137", code, err)
		}
	})
	t.Run("output is bounded", func(t *testing.T) {
		code, out, err := d.Exec(ctxFor(t), h, []string{"head", "-c", "1000000", "/dev/zero"})
		if err != nil || code != 0 {
			t.Fatalf("Exec = %d, %v", code, err)
		}
		if len(out) != exec.ExecOutputLimit {
			t.Errorf("output is %d bytes, want %d", len(out), exec.ExecOutputLimit)
		}
	})
	t.Run("not found", func(t *testing.T) {
		_, _, err := d.Exec(ctxFor(t), h, []string{"no-such-check"})
		if err == nil || !strings.Contains(err.Error(), `"no-such-check" not found`) {
			t.Errorf("Exec = %v", err)
		}
	})
	t.Run("empty", func(t *testing.T) {
		if _, _, err := d.Exec(ctxFor(t), h, nil); err == nil {
			t.Error("Exec of no command succeeded")
		}
	})
	t.Run("context ends it and its children", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pidFile := filepath.Join(spec.TaskDir, "exec-child")
		done := make(chan error, 1)
		go func() {
			_, _, err := d.Exec(ctx, h, []string{"sh", "-c", "sleep 1000 & echo $! > exec-child; wait"})
			done <- err
		}()
		_, child := readPid(t, pidFile)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Exec = %v, want context.Canceled", err)
			}
		case <-time.After(deadline):
			t.Fatal("Exec did not return when its context ended")
		}
		if !exitedWithin(child, deadline) {
			t.Error("the command's child outlived the context")
		}
	})
}

func TestDestroyIsIdempotent(t *testing.T) {
	d := newDriver(t, exec.Config{})
	h := start(t, d, testSpec(t, "true"))
	wait(t, d, h)
	for range 2 {
		if err := d.Destroy(ctxFor(t), h); err != nil {
			t.Fatalf("Destroy: %v", err)
		}
	}
	// Once destroyed and forgotten, the handle is gone.
	if exit := wait(t, d, h); !errors.Is(exit.Err, driver.ErrGone) || exit.Code != -1 {
		t.Errorf("Wait after Destroy = %+v, want ErrGone", exit)
	}
}

func TestBadHandles(t *testing.T) {
	d := newDriver(t, exec.Config{})
	h := start(t, d, testSpec(t, "true"))
	cases := map[string]driver.Handle{
		"other driver": {Driver: "docker", ID: h.ID, State: h.State},
		"no pid":       {Driver: "exec", ID: "abc", State: h.State},
		"no state":     {Driver: "exec", ID: h.ID},
		"bad state":    {Driver: "exec", ID: h.ID, State: []byte("{")},
	}
	for name, bad := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := ctxFor(t)
			if err := d.Recover(ctx, bad); err == nil || errors.Is(err, driver.ErrGone) {
				t.Errorf("Recover = %v, want a handle error", err)
			}
			if err := d.Signal(ctx, bad, syscall.SIGTERM); err == nil {
				t.Error("Signal succeeded")
			}
			if _, err := d.Wait(ctx, bad); err == nil {
				t.Error("Wait succeeded")
			}
			if err := d.Destroy(ctx, bad); err == nil {
				t.Error("Destroy succeeded")
			}
			if _, _, err := d.Exec(ctx, bad, []string{"true"}); err == nil {
				t.Error("Exec succeeded")
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	d := newDriver(t, exec.Config{})
	fp := d.Fingerprint(ctxFor(t))
	if !fp.Available || !strings.HasPrefix(fp.Detail, "linux ") || !strings.Contains(fp.Detail, "cgroup") {
		t.Errorf("Fingerprint = %+v, want available, with the kernel and the cgroup verdict", fp)
	}
	t.Logf("fingerprint: %s", fp.Detail)
}

func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
