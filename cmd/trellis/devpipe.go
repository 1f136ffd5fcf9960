package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Once dev is notified of SIGPIPE, Go delivers every SIGPIPE the process
// raises, whatever the descriptor: a write to an HTTP client that hung up
// on a watch (`trellis task wait` once it has its answer) raises one too.
// Only a broken stdout or stderr (`trellis dev | tee log`, then Ctrl-C)
// means the reader of dev's output is gone, and stops dev.

// filterPipe forwards the signals of in to the returned channel, dropping
// a SIGPIPE while dev's output is not broken (broken says whether it is),
// until done is closed.
func filterPipe(in <-chan os.Signal, done <-chan struct{}, broken func() bool) chan os.Signal {
	out := make(chan os.Signal, cap(in))
	go func() {
		for {
			select {
			case sig := <-in:
				if sig == syscall.SIGPIPE && !broken() {
					continue
				}
				select {
				case out <- sig:
				default: // as signal.Notify, a full channel drops it
				}
			case <-done:
				return
			}
		}
	}()
	return out
}

// outputBroken says whether stdout or stderr is a pipe whose reader is
// gone: poll reports an error on a pipe's write end with no reader left.
func outputBroken() bool { return pipeBroken(1) || pipeBroken(2) }

func pipeBroken(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&unix.POLLERR != 0
}
