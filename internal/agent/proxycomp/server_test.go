package proxycomp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A socket deeper than a Unix socket's address may name is bound and
// reached through its directory.
func TestListenAndDialALongPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := SocketPath(dir)
	if len(path) <= maxSocketPath {
		t.Fatalf("the path is short: %d bytes", len(path))
	}
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := DialUnix(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := make([]byte, 2)
	if _, err := c.Read(b); err != nil || string(b) != "hi" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// A stale socket is removed; nothing there is no error; a file that is
// not a socket is left alone.
func TestRemoveSocket(t *testing.T) {
	dir := t.TempDir()
	path := SocketPath(dir)
	if err := removeSocket(path); err != nil {
		t.Errorf("nothing there: %v", err)
	}
	ln, err := ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if err := removeSocket(path); err != nil {
		t.Errorf("a stale socket: %v", err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stale socket is still there: %v", err)
	}
	if err := os.WriteFile(path, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := removeSocket(path); !errors.Is(err, errNotSocket) {
		t.Errorf("a regular file: %v, want errNotSocket", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "mine" {
		t.Error("the regular file was removed")
	}
}
