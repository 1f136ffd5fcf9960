package proxy

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestInboundDrain: requests in flight when the drain starts complete,
// over HTTP/1.1 and HTTP/2; new connections are refused.
func TestInboundDrain(t *testing.T) {
	now := time.Now()
	c := newTestCA(t, testTD, now)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}, 2), make(chan struct{})
	app := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		io.WriteString(w, "done")
	})}
	go app.Serve(ln)
	t.Cleanup(func() { app.Close() })

	snap := testSnapshot(t, c, "api", "http", ln.Addr().String())
	snap.Inbound.Intentions = allowing("web")
	p := newTestProxy(t)
	addr := startInbound(t, p, snap)
	webLeaf, webKey := c.leaf(t, "default", "web", now, time.Hour)
	roots := [][]byte{c.rootPEM()}
	clients := map[string]*http.Client{
		"HTTP/1.1": {Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(t, webLeaf, webKey, roots)}},
		"HTTP/2":   http2Client(clientTLS(t, webLeaf, webKey, roots, "h2")),
	}
	type result struct {
		name, body string
		code       int
		err        error
	}
	results := make(chan result, len(clients))
	for name, client := range clients {
		go func() {
			resp, err := client.Get("https://" + addr + "/slow")
			if err != nil {
				results <- result{name: name, err: err}
				return
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{name, string(body), resp.StatusCode, err}
		}()
	}
	<-started
	<-started
	p.Drain()
	waitFor(t, "the inbound listener to close", func() bool { return p.Addr("inbound") == nil })
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Error("a new connection was accepted after the drain began")
	}
	close(release)
	for range clients {
		r := <-results
		if r.err != nil || r.code != 200 || r.body != "done" {
			t.Errorf("%s: the request in flight: %d %q %v", r.name, r.code, r.body, r.err)
		}
	}
}
