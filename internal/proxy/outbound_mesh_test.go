package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

// plainEcho is an app: it answers each connection with "app" on a line,
// then echoes.
func plainEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				io.WriteString(conn, "app\n")
				io.Copy(conn, conn)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestOutboundToAnotherProxysInbound: the whole hop. An app's connection
// to its explicit upstream goes through its proxy, over mTLS to the
// counting service's proxy, whose inbound allows the dashboard and hands
// it to the counting app; once the intentions deny the dashboard, the
// counting proxy closes the connection.
func TestOutboundToAnotherProxysInbound(t *testing.T) {
	c := newTestCA(t, testTD, time.Now())

	counting := newTestProxy(t)
	countingSnap := testSnapshot(t, c, "counting", "tcp", plainEcho(t))
	countingSnap.Inbound.Intentions = allowing("dashboard")
	if err := counting.Update(countingSnap); err != nil {
		t.Fatal(err)
	}
	runProxy(t, counting)
	countingInbound := waitAddr(t, counting, "inbound")

	dashboard := newTestProxy(t)
	dashSnap := testSnapshot(t, c, "dashboard", "tcp", "127.0.0.1:1")
	dashSnap.Upstreams = []*pbproxy.Upstream{countingUpstream(c, countingInbound)}
	if err := dashboard.Update(dashSnap); err != nil {
		t.Fatal(err)
	}
	runProxy(t, dashboard)
	upstream := waitAddr(t, dashboard, "upstream default/counting")

	roundTrip := func(msg string) (string, error) {
		conn, err := net.DialTimeout("tcp", upstream, 10*time.Second)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintln(conn, msg)
		r := bufio.NewReader(conn)
		var lines []string
		for range 2 {
			line, err := r.ReadString('\n')
			if err != nil {
				return strings.Join(lines, ""), err
			}
			lines = append(lines, line)
		}
		return strings.Join(lines, ""), nil
	}
	for i := range 3 {
		got, err := roundTrip(fmt.Sprint("hello ", i))
		if want := fmt.Sprintf("app\nhello %d\n", i); err != nil || got != want {
			t.Fatalf("round trip %d: %q, %v; want %q", i, got, err, want)
		}
	}

	countingSnap.Version = "v2"
	countingSnap.Inbound.Intentions = nil // the default: deny
	if err := counting.Update(countingSnap); err != nil {
		t.Fatal(err)
	}
	got, err := roundTrip("denied")
	if err == nil || got != "" {
		t.Fatalf("after the deny: %q, %v; want the connection closed", got, err)
	}
}
