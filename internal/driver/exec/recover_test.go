//go:build linux

package exec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/driver/exec"
)

// An agent restarted while a container runs: the fake agent started it and
// exited; a new Driver recovers the handle, watches the process end
// (through a pidfd: it is not our child), signals it and rotates its logs.
func TestRecoverAfterAgentRestart(t *testing.T) {
	b := newBurster(t, 3)
	// The restarted agent has the same configuration: where cgroups are
	// enforced, Destroy removes only groups below its own parent.
	cfg := rotatingConfig(3)
	cfg.CgroupParent = "trellis-test-" + randomName()
	h := startInOtherAgent(t, b.spec, "", cfg.CgroupParent)
	pid, _ := strconv.Atoi(h.ID)
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })
	if ppid := parentOf(t, pid); ppid == os.Getpid() {
		t.Fatalf("the container is a child of the test process; the test proves nothing")
	}

	d := newDriver(t, cfg)
	if err := d.Recover(ctxFor(t), h); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	// Recovering twice is harmless.
	if err := d.Recover(ctxFor(t), h); err != nil {
		t.Fatalf("second Recover: %v", err)
	}
	// Still running: a Wait whose context ends says so.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Wait(ctx, h); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled while the process runs", err)
	}

	// The new Driver rotates the recovered container's logs.
	b.next(t)
	b.waitRotated(t, 0)
	b.next(t)
	b.waitRotated(t, 1)
	if got, want := readLogs(t, d, h, b.spec, driver.Stdout), b.joined(0, 2); got != want {
		t.Errorf("Logs = %d bytes, want bursts 0 and 1 (%d bytes)", len(got), len(want))
	}

	// The script is blocked on the fifo; TERM ends it.
	if err := d.Signal(ctxFor(t), h, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exit := wait(t, d, h)
	if exit.Code != -1 || exit.Signal != 0 || exit.Err != nil {
		t.Errorf("exit = %+v, want code -1 (unknown: not our child)", exit)
	}
	if err := d.Recover(ctxFor(t), h); !errors.Is(err, driver.ErrGone) {
		t.Errorf("Recover after exit = %v, want ErrGone", err)
	}
	if err := d.Destroy(ctxFor(t), h); err != nil {
		t.Errorf("Destroy: %v", err)
	}
}

// Wait on a handle the Driver has not seen recovers it first.
func TestWaitRecoversImplicitly(t *testing.T) {
	spec := testSpec(t, "sleep", "1000")
	parent := "trellis-test-" + randomName()
	h := startInOtherAgent(t, spec, "", parent)
	d := newDriver(t, exec.Config{CgroupParent: parent})
	t.Cleanup(func() { cleanup(t, d, h) })
	// A Wait whose context has already ended still attaches first.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := d.Wait(ctx, h); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	if err := d.Signal(ctxFor(t), h, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Attached while the process ran, the Driver saw it end: an exit, not
	// ErrGone.
	if exit := wait(t, d, h); exit.Code != -1 || exit.Err != nil {
		t.Errorf("exit = %+v, want code -1 and no error", exit)
	}
}

func TestRecoverRefusesADeadProcess(t *testing.T) {
	d := newDriver(t, exec.Config{})
	h := start(t, d, testSpec(t, "true"))
	wait(t, d, h)

	d2 := newDriver(t, exec.Config{})
	err := d2.Recover(ctxFor(t), h)
	if !errors.Is(err, driver.ErrGone) {
		t.Fatalf("Recover of an exited process = %v, want ErrGone", err)
	}
	if exit := wait(t, d2, h); exit.Code != -1 || !errors.Is(exit.Err, driver.ErrGone) {
		t.Errorf("Wait = %+v, want code -1 and ErrGone", exit)
	}
	if err := d2.Signal(ctxFor(t), h, syscall.SIGTERM); err != nil {
		t.Errorf("Signal of an exited process = %v, want nil", err)
	}
	// The Driver that started it also calls it gone.
	if err := d.Recover(ctxFor(t), h); !errors.Is(err, driver.ErrGone) {
		t.Errorf("Recover by the starting Driver = %v, want ErrGone", err)
	}
}

// A handle whose pid now belongs to another process (here: the right pid
// with a start time that does not match) is refused, and never signalled.
func TestRecoverRefusesARecycledPid(t *testing.T) {
	d := newDriver(t, exec.Config{})
	h := start(t, d, testSpec(t, "sleep", "1000"))
	for _, delta := range []int64{-1, 1} {
		fake := withStartTicks(t, h, delta)
		d2 := newDriver(t, exec.Config{})
		err := d2.Recover(ctxFor(t), fake)
		if !errors.Is(err, driver.ErrGone) || !strings.Contains(err.Error(), "another process") {
			t.Fatalf("Recover with start time %+d = %v, want ErrGone naming another process", delta, err)
		}
		if exit := wait(t, d2, fake); !errors.Is(exit.Err, driver.ErrGone) {
			t.Errorf("Wait = %+v, want ErrGone", exit)
		}
		if err := d2.Signal(ctxFor(t), fake, syscall.SIGKILL); err != nil {
			t.Errorf("Signal = %v, want nil (not ours)", err)
		}
	}
	// Had the SIGKILLs reached it, the process would not end by TERM.
	if err := d.Signal(ctxFor(t), h, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exit := wait(t, d, h); exit.Signal != syscall.SIGTERM {
		t.Errorf("exit = %+v, want SIGTERM: the fake handles must not have signalled it", exit)
	}
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}
