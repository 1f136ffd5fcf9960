package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes network namespaces")
	}
}

// A namespace made by Create is a separate network: a port bound in it
// is free outside it; it outlives Do, and Remove lets it go.
func TestCreateDoRemove(t *testing.T) {
	requireRoot(t)
	path := filepath.Join(t.TempDir(), "ns")
	if err := Create(path); err != nil {
		t.Fatal(err)
	}
	if !Is(path) {
		t.Fatal("Create made no namespace")
	}
	if err := Create(path); err == nil {
		t.Fatal("Create over an existing one")
	}
	var inside []net.Interface
	if err := Do(path, func() (err error) { inside, err = net.Interfaces(); return err }); err != nil {
		t.Fatal(err)
	}
	if len(inside) != 1 || inside[0].Name != "lo" || inside[0].Flags&net.FlagUp != 0 {
		t.Fatalf("a new namespace holds %v, want lo alone, down", inside)
	}
	// Do ran fn in the namespace, and the thread went back after it.
	own, _ := os.Readlink("/proc/thread-self/ns/net")
	var in string
	if err := Do(path, func() (err error) { in, err = os.Readlink("/proc/thread-self/ns/net"); return err }); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if in == own || !strings.Contains(in, strconv.FormatUint(st.Sys().(*syscall.Stat_t).Ino, 10)) {
		t.Fatalf("fn ran in %s; the namespace is %d, the test's %s", in, st.Sys().(*syscall.Stat_t).Ino, own)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("mount point after Remove: %v", err)
	}
	if err := Remove(path); err != nil {
		t.Fatalf("Remove twice: %v", err)
	}
}

// Bind holds a process's namespace after the process is gone; a process
// started in Do runs in the namespace.
func TestBindHoldsAProcesssNamespace(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	made := filepath.Join(dir, "made")
	if err := Create(made); err != nil {
		t.Fatal(err)
	}
	defer Remove(made)
	var cmd *exec.Cmd
	if err := Do(made, func() error {
		cmd = exec.Command("sleep", "600")
		return cmd.Start()
	}); err != nil {
		t.Fatal(err)
	}
	nsOf := func(pid int) string {
		s, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	child := nsOf(cmd.Process.Pid)
	if child == nsOf(os.Getpid()) {
		t.Fatal("the process started in Do runs in the agent's namespace")
	}
	held := filepath.Join(dir, "held")
	if err := Bind(cmd.Process.Pid, held); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	a, _ := os.Stat(held)
	b, _ := os.Stat(made)
	if !Is(held) || !os.SameFile(a, b) {
		t.Fatal("the bound namespace is not the process's")
	}
	if err := Remove(held); err != nil {
		t.Fatal(err)
	}
	if err := Bind(0, held); err == nil {
		t.Fatal("Bind of pid 0")
	}
}

func TestCheckRefusesOtherFiles(t *testing.T) {
	if err := Check("/etc/hostname"); !errors.Is(err, ErrNotNetns) {
		t.Fatalf("/etc/hostname: %v", err)
	}
	var ee *EnterError
	if err := Do("/nonexistent", func() error { return nil }); !errors.As(err, &ee) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Do in a missing file: %v", err)
	}
	boom := errors.New("boom")
	if err := Do("/proc/self/ns/net", func() error { return boom }); err != boom {
		t.Fatalf("fn's error: %v", err)
	}
}

// Dialer connects from inside the namespace: to its loopback, which the
// host's 127.0.0.1 is not.
func TestDialer(t *testing.T) {
	requireRoot(t)
	path := filepath.Join(t.TempDir(), "ns")
	if err := Create(path); err != nil {
		t.Fatal(err)
	}
	defer Remove(path)
	var ln net.Listener
	if err := Do(path, func() (err error) {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("inside\n"))
			c.Close()
		}
	}()
	conn, err := Dialer(path)(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, err := io.ReadAll(conn)
	if err != nil || string(b) != "inside\n" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := Dialer(filepath.Join(t.TempDir(), "none"))(context.Background(), "tcp", ln.Addr().String()); err == nil {
		t.Fatal("a dial through a missing namespace")
	}
}
