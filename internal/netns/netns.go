// Package netns is the few network-namespace operations Trellis needs,
// with golang.org/x/sys/unix and no shelling out to `ip netns`: make a
// namespace and hold it with a bind mount, hold another process's, let
// one go, and run Go code (a dial, a fork/exec) inside one.
//
// A namespace lives as long as something holds it: a process in it, an
// open file of it, or a bind mount of its nsfs file. A bind mount outlives
// the process that made it, so an agent killed with SIGKILL finds its
// tasks' namespaces where it left them; it is gone once unmounted, or at
// reboot (the mount point then is an empty file: Is tells the two apart).
//
// Go runs goroutines on any OS thread, and a namespace belongs to a
// thread. Every function here that enters a namespace does it on a thread
// locked to one goroutine, and goes back to the thread's own namespace
// afterwards or, when it cannot, lets the runtime end the thread rather
// than reuse it. Going back matters even for a thread that could be
// thrown away: the runtime never ends the main thread, and /proc/self/net
// shows the main thread's namespace. The
// runtime never makes new threads from a locked one (since Go 1.10), so
// no other goroutine ever runs in a namespace by accident.
package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// Create makes a new network namespace, with only a loopback device
// (down), and mounts it at path, which must not exist. A thread of ours
// unshares its namespace, mounts it, and goes back to its own.
func Create(path string) error {
	if err := createMountPoint(path); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("this thread's network namespace: %w", err)
			return
		}
		defer own.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("unshare a network namespace: %w", err)
			return
		}
		self := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
		err = unix.Mount(self, path, "", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("bind-mount the namespace at %s: %w", path, err)
		}
		// Back to where the thread was: a thread left in the new
		// namespace would be ended by the runtime, except the main
		// thread, which it keeps (parked), and whose namespace is what
		// /proc/self/ns/net and /proc/net show.
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		_ = os.Remove(path)
		return err
	}
	return nil
}

// Bind mounts the network namespace of process pid at path, which must
// not exist: a namespace another runtime made (a container's) is then
// held like one of Create's, whatever becomes of the process.
func Bind(pid int, path string) error {
	if pid <= 0 {
		return fmt.Errorf("pid %d is not a process", pid)
	}
	if err := createMountPoint(path); err != nil {
		return err
	}
	src := "/proc/" + strconv.Itoa(pid) + "/ns/net"
	if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("bind-mount %s at %s: %w", src, path, err)
	}
	return nil
}

// createMountPoint makes the empty file a namespace is mounted on.
func createMountPoint(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("namespace mount point: %w", err)
	}
	return f.Close()
}

// Remove unmounts the namespace at path and removes its mount point; the
// namespace ends once nothing else holds it. A path that is gone, or no
// longer mounted, is not an error.
func Remove(path string) error {
	// MNT_DETACH: a process that has the file open (an `nsenter` someone
	// left running) does not keep the mount point busy.
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount the namespace at %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the namespace's mount point: %w", err)
	}
	return nil
}

// Is reports whether path is a network namespace (a file of nsfs, or
// /proc/PID/ns/net), rather than a mount point left empty.
func Is(path string) bool { return Check(path) == nil }

// ErrNotNetns is wrapped by Check's refusal of a file that is not a
// network namespace.
var ErrNotNetns = errors.New("not a network namespace (a file of nsfs, such as /run/netns/NAME or /proc/PID/ns/net)")

// Check says why path is not a network namespace, before setns would say
// only "invalid argument".
func Check(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return checkFile(f, path)
}

func checkFile(f *os.File, path string) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Type != unix.NSFS_MAGIC && st.Type != unix.PROC_SUPER_MAGIC {
		return fmt.Errorf("%s: %w", path, ErrNotNetns)
	}
	return nil
}

// Do runs fn on an OS thread that is in the network namespace at path:
// the sockets fn opens and the processes it starts (fork/exec from this
// thread) are in that namespace; goroutines it starts are not. The thread
// goes back to its own namespace afterwards, or, if it cannot, is thrown
// away rather than reused. Do's own errors (the namespace cannot be
// entered) come back as *EnterError; fn's as fn returned them.
func Do(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return &EnterError{Path: path, Err: err}
	}
	defer target.Close()
	if err := checkFile(target, path); err != nil {
		return &EnterError{Path: path, Err: err}
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- &EnterError{Path: path, Err: fmt.Errorf("this thread's network namespace: %w", err)}
			return
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- &EnterError{Path: path, Err: fmt.Errorf("entering %s: %w", path, err)}
			return
		}
		err = fn()
		if unix.Setns(int(own.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the goroutine ends locked, and the runtime ends the thread
		done <- err
	}()
	return <-done
}

// Dialer returns a DialContext that opens its connections from inside the
// network namespace at path: what the agent's health checks of a bridge
// task use, since the task's 127.0.0.1 and ports are there. Each dial
// takes a thread for its duration.
func Dialer(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var conn net.Conn
		err := Do(path, func() (err error) {
			var d net.Dialer
			conn, err = d.DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// EnterError is Do's failure to enter a namespace (fn did not run).
type EnterError struct {
	Path string
	Err  error
}

func (e *EnterError) Error() string { return e.Err.Error() }
func (e *EnterError) Unwrap() error { return e.Err }
