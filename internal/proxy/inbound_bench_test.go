package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkInboundHTTP is one allowed HTTP/1.1 request of 1 KB with a
// 1 KB answer through the inbound listener (TLS kept alive, the
// intentions, XFCC, the app on loopback), beside the same request to the
// app directly.
func BenchmarkInboundHTTP(b *testing.B) {
	c := newTestCA(b, testTD, time.Now())
	answer := strings.Repeat("a", 1024)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, answer)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: app}
	go srv.Serve(ln)
	defer srv.Close()
	appAddr := ln.Addr().String()
	snap := testSnapshot(b, c, "api", "http", appAddr)
	snap.Inbound.Intentions = allowing("web")
	p := newTestProxy(b)
	if err := p.Update(snap); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(b, "the inbound listener", func() bool { return p.Addr("inbound") != nil })
	addr := p.Addr("inbound").String()
	webLeaf, webKey := c.leaf(b, "default", "web", time.Now(), time.Hour)
	body := strings.Repeat("q", 1024)
	run := func(b *testing.B, client *http.Client, url string) {
		for b.Loop() {
			resp, err := client.Post(url, "text/plain", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, &http.Client{}, "http://"+appAddr+"/") })
	b.Run("proxied", func(b *testing.B) {
		run(b, &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS(b, webLeaf, webKey, [][]byte{c.rootPEM()})}}, "https://"+addr+"/")
	})
}
