package proxy

import (
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"
)

// TestSpliceCarriesBothWaysAndHalfCloses runs splice between two real TCP
// connections: each side's end of stream reaches the other, and the
// other side can still answer.
func TestSpliceCarriesBothWaysAndHalfCloses(t *testing.T) {
	clientSide, proxyFront := tcpPair(t)
	proxyBack, serverSide := tcpPair(t)
	type counts struct{ aToB, bToA int64 }
	result := make(chan counts, 1)
	go func() {
		a, b := splice(proxyFront, proxyBack, 0)
		result <- counts{a, b}
	}()
	if _, err := clientSide.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	clientSide.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(serverSide)
	if err != nil || string(got) != "ping" {
		t.Fatalf("server read %q, %v", got, err)
	}
	if _, err := serverSide.Write([]byte("pong!")); err != nil {
		t.Fatal(err)
	}
	serverSide.Close()
	got, err = io.ReadAll(clientSide)
	if err != nil || string(got) != "pong!" {
		t.Fatalf("client read %q, %v", got, err)
	}
	if c := <-result; c.aToB != 4 || c.bToA != 5 {
		t.Errorf("counted %+v, want 4 and 5", c)
	}
}

// TestSpliceIdleTimeout: traffic keeps a spliced pair open past the idle
// timeout; silence for the timeout closes it.
func TestSpliceIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		client, front := net.Pipe()
		back, server := net.Pipe()
		done := make(chan struct{})
		go func() {
			splice(front, back, 10*time.Second)
			close(done)
		}()
		go io.Copy(io.Discard, server)
		for range 3 {
			time.Sleep(6 * time.Second)
			if _, err := client.Write([]byte("x")); err != nil {
				t.Fatalf("write after 6 s of quiet: %v", err)
			}
		}
		start := time.Now()
		<-done
		if d := time.Since(start); d != 10*time.Second {
			t.Errorf("closed %v after the last byte, want 10s", d)
		}
		if _, err := client.Write([]byte("x")); err == nil {
			t.Error("write after the idle timeout succeeded")
		}
	})
}

// tcpPair is two ends of one loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}
