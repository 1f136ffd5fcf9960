package exec

import (
	"fmt"
	osexec "os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// The forker: where the processes of a driver with DieWithAgent are forked.
//
// A parent-death signal (PR_SET_PDEATHSIG) fires when the *thread* that
// forked the process exits, not the process: Go ends a thread whenever a
// goroutine exits while locked to it (netns.Do does, when it cannot leave
// a namespace), and a task forked from such a thread would be killed at
// once. So every such fork happens on one thread kept for the life of the
// process: a goroutine locked to it that never returns. Should that
// thread ever be left in a task's namespace (it could not go back), it is
// parked for good, still the parent of what it forked, and a new thread
// takes the requests over.

type forkRequest struct {
	netns string
	cmd   *osexec.Cmd
	done  chan error
}

// forker forks on its own thread; see above.
type forker struct {
	once sync.Once
	reqs chan forkRequest
}

// start runs cmd.Start on the forker's thread, in the network namespace
// at netnsPath when set.
func (f *forker) start(netnsPath string, cmd *osexec.Cmd) error {
	f.once.Do(func() {
		f.reqs = make(chan forkRequest)
		go f.loop(f.reqs)
	})
	r := forkRequest{netns: netnsPath, cmd: cmd, done: make(chan error, 1)}
	f.reqs <- r
	return <-r.done
}

func (f *forker) loop(reqs chan forkRequest) {
	runtime.LockOSThread() // for good: see the comment at the top
	for r := range reqs {
		if r.netns == "" {
			r.done <- wrapStart(r.cmd, r.cmd.Start())
			continue
		}
		stuck, err := startInNetnsHere(r.netns, r.cmd)
		r.done <- err
		if stuck {
			go f.loop(reqs) // a new thread takes the requests over
			select {}       // keep this one, parent of what it forked, alive
		}
	}
}

// startInNetnsHere starts cmd from this (locked) thread inside the
// namespace at path, and goes back; stuck when it could not go back.
func startInNetnsHere(path string, cmd *osexec.Cmd) (stuck bool, err error) {
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("netns: this thread's network namespace: %w", err)
	}
	defer unix.Close(own)
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("netns: the task's network namespace: %w", err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return false, fmt.Errorf("netns: the task's network namespace: entering %s: %w", path, err)
	}
	err = wrapStart(cmd, cmd.Start())
	return unix.Setns(own, unix.CLONE_NEWNET) != nil, err
}

func wrapStart(cmd *osexec.Cmd, err error) error {
	if err != nil {
		return fmt.Errorf("command: start %s: %w", cmd.Path, err)
	}
	return nil
}
