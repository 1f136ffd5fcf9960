package docker

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"trellis.dev/trellis/internal/driver"
	execdriver "trellis.dev/trellis/internal/driver/exec"
	"trellis.dev/trellis/internal/netns"
)

// The holder's program is a well-formed static executable for each
// architecture that has one.
func TestPauseELF(t *testing.T) {
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		b, err := pauseELF(arch)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.NewFile(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if f.Machine != machine || f.Type != elf.ET_EXEC || f.Class != elf.ELFCLASS64 || len(f.Progs) != 1 || f.Progs[0].Type != elf.PT_LOAD {
			t.Fatalf("%s: %+v", arch, f.FileHeader)
		}
		p := f.Progs[0]
		if f.Entry < p.Vaddr || f.Entry >= p.Vaddr+p.Memsz || p.Filesz != uint64(len(b)) {
			t.Fatalf("%s: entry %#x outside the segment %#x+%d", arch, f.Entry, p.Vaddr, p.Memsz)
		}
	}
	if _, err := pauseELF("riscv64"); err == nil || !strings.Contains(err.Error(), "no network namespace holder for riscv64") {
		t.Fatalf("riscv64: %v", err)
	}
}

// On this host the program runs: it waits, doing nothing, until killed.
func TestPauseRuns(t *testing.T) {
	b, err := pauseELF(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	path := filepath.Join(t.TempDir(), "pause")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// It sleeps in its system call: state S, not running nor exited.
	deadline := time.Now().Add(30 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		fields := strings.Fields(string(stat))
		if fields[2] == "S" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pause is in state %s", fields[2])
		}
		runtime.Gosched()
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("pause ended with %v", err)
	}
}

var hostProbe struct {
	once sync.Once
	path string
	err  error
}

// probeBinary is driverprobe built for this host, for the exec driver.
func probeBinary(t *testing.T) string {
	t.Helper()
	hostProbe.once.Do(func() {
		dir, err := os.MkdirTemp("", "driverprobe-host")
		if err != nil {
			hostProbe.err = err
			return
		}
		hostProbe.path = filepath.Join(dir, "driverprobe")
		cmd := exec.Command("go", "build", "-o", hostProbe.path, "./testdata/driverprobe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			hostProbe.err = err
			t.Logf("%s", out)
		}
	})
	if hostProbe.err != nil {
		t.Fatalf("building driverprobe for the host: %v", hostProbe.err)
	}
	return hostProbe.path
}

// A bridge task's namespace, held by the holder container, is shared by
// its docker containers (joined to the holder) and its exec containers
// (started in the bind-mounted namespace): each reaches the other on
// 127.0.0.1. The namespace outlives the holder, which the agent removes
// last.
func TestDockerAndExecShareTheTasksNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: holds a network namespace with a bind mount")
	}
	probe := probeImage(t)
	t.Parallel()
	ctx := testCtx(t)
	d := newTestDriver(t, Config{})
	uid := "u" + randomHex(t)
	holder, pid, err := d.HoldNetns(ctx, "ns/web", uid)
	if err != nil {
		t.Fatal(err)
	}
	if again, _, err := d.HoldNetns(ctx, "ns/web", uid); err != nil || again.ID != holder.ID {
		t.Fatalf("a second HoldNetns: %v %v, want the running holder %s", again.ID, err, holder.ID)
	}
	path := filepath.Join(t.TempDir(), "netns")
	if err := netns.Bind(pid, path); err != nil {
		t.Fatal(err)
	}
	defer netns.Remove(path)

	// exec serves, docker calls.
	ex := execdriver.New(execdriver.Config{CgroupParent: "trellis-test-" + randomHex(t)})
	dir := t.TempDir()
	execSpec := driver.Spec{TaskID: "ns/web", TaskUID: uid, Container: "exec-app", Command: []string{probeBinary(t), "serve", "18080"},
		LogDir: filepath.Join(dir, "logs"), TaskDir: dir, Netns: path}
	eh, err := ex.Start(ctx, execSpec)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = ex.Signal(context.Background(), eh, syscall.SIGKILL)
		_, _ = ex.Wait(context.Background(), eh)
		_ = ex.Destroy(context.Background(), eh)
	}()
	client := driver.Spec{TaskID: "ns/web", TaskUID: uid, Container: "docker-client", Image: probe,
		Command: []string{"/driverprobe", "get", "http://127.0.0.1:18080/"}, Netns: path, NetnsHolder: holder.ID}
	ch := start(t, ctx, d, client)
	if exit := wait(t, ctx, d, ch); exit.Code != 0 {
		t.Fatalf("the docker container did not reach the exec one on 127.0.0.1: %+v: %s", exit, readLog(t, ctx, d, ch, driver.Stderr))
	}
	if got := readLog(t, ctx, d, ch, driver.Stdout); got != "probe\n" {
		t.Fatalf("docker client got %q", got)
	}

	// docker serves, exec calls.
	server := driver.Spec{TaskID: "ns/web", TaskUID: uid, Container: "docker-app", Image: probe,
		Command: []string{"/driverprobe", "serve", "18081"}, Netns: path, NetnsHolder: holder.ID}
	start(t, ctx, d, server)
	execClient := execSpec
	execClient.Container, execClient.Command = "exec-client", []string{probeBinary(t), "get", "http://127.0.0.1:18081/"}
	ech, err := ex.Start(ctx, execClient)
	if err != nil {
		t.Fatal(err)
	}
	if exit, err := ex.Wait(ctx, ech); err != nil || exit.Code != 0 {
		t.Fatalf("the exec container did not reach the docker one on 127.0.0.1: %+v %v", exit, err)
	}
	_ = ex.Destroy(ctx, ech)

	owned, err := d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range owned {
		found = found || (o.Handle.ID == holder.ID && o.TaskUID == uid && o.Container == "")
	}
	if !found {
		t.Fatalf("the holder is not in the inventory as the task's: %+v", owned)
	}

	if err := d.ReleaseNetns(ctx, holder); err != nil {
		t.Fatal(err)
	}
	if err := d.Recover(ctx, holder); !isGoneErr(err) {
		t.Fatalf("holder after ReleaseNetns: %v", err)
	}
	if !netns.Is(path) {
		t.Fatal("the namespace went with its holder")
	}
	if err := d.ReleaseNetns(ctx, holder); err != nil {
		t.Fatalf("ReleaseNetns twice: %v", err)
	}
}

func TestCreateConfigJoinsTheHolder(t *testing.T) {
	spec := validSpec()
	spec.Ports = []int{8080}
	spec.Netns, spec.NetnsHolder = "/data/network/netns/u1", "0123abcd"
	_, host, err := createConfig(spec, owner{agent: "agent"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if host.NetworkMode != "container:0123abcd" || host.PortBindings != nil || host.ExtraHosts != nil {
		t.Fatalf("mode %q bindings %v extra hosts %v", host.NetworkMode, host.PortBindings, host.ExtraHosts)
	}
	spec.NetnsHolder = ""
	if _, _, err := createConfig(spec, owner{agent: "agent"}, ""); err == nil || !strings.Contains(err.Error(), "spec.NetnsHolder: empty, but spec.Netns is set") {
		t.Fatalf("no holder: %v", err)
	}
}
