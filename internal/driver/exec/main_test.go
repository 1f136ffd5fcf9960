//go:build linux

package exec_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"trellis.dev/trellis/internal/driver"
	"trellis.dev/trellis/internal/driver/exec"
)

// The test binary plays several roles, chosen by roleEnv:
//
//   - "" (as go test starts it): a reaper. It makes itself a child
//     subreaper and runs the tests in a child process. Orphans of the
//     tests (grandchildren of killed shells, containers of a fake agent
//     that exited) are reparented to it and reaped, instead of becoming
//     zombies of a pid 1 that may not reap them. Whatever still runs when
//     the tests end is killed.
//   - "tests": runs the tests.
//   - "agent": a fake agent for the restart tests. It starts one container
//     with its own Driver, prints the handle as JSON and exits at once, as
//     an agent killed right after a start would. The container is then no
//     child of the test process that recovers it.
//   - "hog": a container that allocates memory until something stops it.
const roleEnv = "TRELLIS_EXEC_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		os.Exit(reap(m))
	case "tests":
		os.Exit(m.Run())
	case "agent":
		os.Exit(fakeAgent())
	case "hog":
		hog()
	default:
		fmt.Fprintf(os.Stderr, "%s: unknown role %q\n", roleEnv, os.Getenv(roleEnv))
		os.Exit(2)
	}
}

func reap(m *testing.M) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "cannot become a subreaper (%v): running the tests in this process\n", err)
		return m.Run()
	}
	p, err := os.StartProcess(os.Args[0], os.Args, &os.ProcAttr{
		Env:   append(os.Environ(), roleEnv+"=tests"),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "start the tests: %v\n", err)
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT)
	go func() {
		for s := range sigs {
			_ = p.Signal(s)
		}
	}()
	code := -1
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			break // ECHILD: nothing left
		}
		if pid == p.Pid {
			code = ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
			killChildren()
		}
	}
	return code
}

// killChildren kills what was reparented to the reaper and still runs.
func killChildren() {
	me := os.Getpid()
	dirs, _ := os.ReadDir("/proc")
	for _, e := range dirs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(me) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// agentEnv carries the fake agent's spec and config.
const agentEnv = "TRELLIS_EXEC_TEST_AGENT"

type agentInput struct {
	Spec         driver.Spec
	CgroupRoot   string
	CgroupParent string
	DieWithAgent bool
	GroupLog     string
}

func fakeAgent() int {
	var in agentInput
	if err := json.Unmarshal([]byte(os.Getenv(agentEnv)), &in); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	d := exec.New(exec.Config{CgroupRoot: in.CgroupRoot, CgroupParent: in.CgroupParent, DieWithAgent: in.DieWithAgent, GroupLog: in.GroupLog})
	h, err := d.Start(ctxFor(nil), in.Spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(h); err != nil {
		return 1
	}
	return 0
}

// hogged keeps what hog allocates reachable.
var hogged [][]byte

func hog() {
	for {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = byte(i)
		}
		hogged = append(hogged, b)
	}
}
