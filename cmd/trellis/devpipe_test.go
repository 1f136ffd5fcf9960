package main

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// A pipe's write end is broken once its reader is gone, and only then.
func TestPipeBroken(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if pipeBroken(int(w.Fd())) {
		t.Error("a pipe with its reader is broken")
	}
	r.Close()
	if !pipeBroken(int(w.Fd())) {
		t.Error("a pipe without its reader is not broken")
	}
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if pipeBroken(int(f.Fd())) {
		t.Error("a file is broken")
	}
}

// A SIGPIPE stops dev only when its output is broken; other signals
// always pass.
func TestFilterPipe(t *testing.T) {
	in := make(chan os.Signal, 4)
	done := make(chan struct{})
	defer close(done)
	broken := make(chan bool, 1)
	broken <- false
	isBroken := func() bool { b := <-broken; broken <- b; return b }
	out := filterPipe(in, done, isBroken)
	in <- syscall.SIGPIPE // a client hung up: dropped
	in <- syscall.SIGINT
	if got := <-out; got != syscall.SIGINT {
		t.Fatalf("got %v first, want SIGINT (the SIGPIPE dropped)", got)
	}
	<-broken
	broken <- true
	in <- syscall.SIGPIPE
	select {
	case got := <-out:
		if got != syscall.SIGPIPE {
			t.Errorf("got %v, want SIGPIPE", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a SIGPIPE with the output broken was not passed on")
	}
}
