package redirect

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on an OS thread that is in the network namespace at
// path (/run/netns/NAME, /proc/PID/ns/net): the sockets fn opens and the
// processes it starts are in that namespace; goroutines it starts are
// not. The thread goes back to its own namespace afterwards, or, if it
// cannot, is thrown away rather than reused.
func InNetns(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--netns: %w", err)
	}
	defer target.Close()
	if err := checkNetns(target); err != nil {
		return fmt.Errorf("--netns: %s: %w", path, err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		own, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("reading this thread's network namespace: %w", err)
			return
		}
		defer own.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("--netns: entering %s: %w", path, err)
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

// checkNetns refuses a file that is not a network namespace, before
// setns would say only "invalid argument".
func checkNetns(f *os.File) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return err
	}
	if st.Type != unix.NSFS_MAGIC && st.Type != unix.PROC_SUPER_MAGIC {
		return fmt.Errorf("not a network namespace (a file of nsfs, such as /run/netns/NAME or /proc/PID/ns/net)")
	}
	return nil
}
