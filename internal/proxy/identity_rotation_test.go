package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

// TestRotationUnderTraffic rotates the CA under two client loops, one
// making a new connection per request and one on a connection kept
// alive: the new root is trusted by both sides, the server's leaf and
// then the client's are renewed by it, and the old root is pruned. No
// request fails, and the kept connection lives through the rotation.
func TestRotationUnderTraffic(t *testing.T) {
	now := time.Now()
	ca1 := newTestCA(t, testTD, now)
	ca2 := newTestCA(t, testTD, now)
	api, web := newTestProxy(t), newTestProxy(t)
	apiSnap := testSnapshot(t, ca1, "api", "http", xfccApp(t))
	apiSnap.Inbound.Intentions = allowing("web")
	addr := startInbound(t, api, apiSnap)
	webSnap := testSnapshot(t, ca1, "web", "http", "127.0.0.1:1")
	if err := web.Update(webSnap); err != nil {
		t.Fatal(err)
	}

	apiID := spiffeOf(testTD, "default", "api")
	transport := func(keepAlive bool, dials *atomic.Int64) *http.Transport {
		return &http.Transport{
			DisableKeepAlives: !keepAlive,
			DialTLSContext: func(ctx context.Context, network, a string) (net.Conn, error) {
				dials.Add(1)
				conf := web.ClientTLS(apiID)
				conf.NextProtos = []string{"http/1.1"}
				return (&tls.Dialer{Config: conf}).DialContext(ctx, network, a)
			},
		}
	}
	var failures, fresh, kept atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	loop := func(ctx context.Context, client *http.Client, ok *atomic.Int64) {
		defer wg.Done()
		for ctx.Err() == nil {
			resp, err := client.Get("https://" + addr + "/")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = &statusErr{resp.StatusCode}
				}
			}
			if err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, err)
				continue
			}
			ok.Add(1)
		}
	}
	keptCtx, stopKept := context.WithCancel(ctx)
	var keptDials, freshDials atomic.Int64
	keptClient := &http.Client{Timeout: 20 * time.Second, Transport: transport(true, &keptDials)}
	wg.Add(2)
	go loop(ctx, &http.Client{Timeout: 20 * time.Second, Transport: transport(false, &freshDials)}, &fresh)
	go loop(keptCtx, keptClient, &kept)
	defer func() { cancel(); wg.Wait() }()
	// more waits for a few more requests of both loops: every request
	// begun before the last step has then ended.
	more := func(step string, withKept bool) {
		f, k := fresh.Load(), kept.Load()
		waitFor(t, "requests after "+step, func() bool {
			return fresh.Load() >= f+3 && (!withKept || kept.Load() >= k+3)
		})
	}
	more("the start", true)

	version := 1
	update := func(p *Proxy, s *pbproxy.Snapshot, change func(*pbproxy.Snapshot)) *pbproxy.Snapshot {
		s = proto.Clone(s).(*pbproxy.Snapshot)
		version++
		s.Version = fmt.Sprintf("v%d", version)
		change(s)
		if err := p.Update(s); err != nil {
			t.Fatalf("Update: %v", err)
		}
		return s
	}
	both := [][]byte{ca1.rootPEM(), ca2.rootPEM()}
	apiSnap = update(api, apiSnap, func(s *pbproxy.Snapshot) { s.Certificates.RootsPem = both })
	webSnap = update(web, webSnap, func(s *pbproxy.Snapshot) { s.Certificates.RootsPem = both })
	more("the new root", true)
	apiSnap = update(api, apiSnap, func(s *pbproxy.Snapshot) {
		s.Certificates.LeafPem, s.Certificates.KeyPem = ca2.leaf(t, "default", "api", time.Now(), time.Hour)
	})
	more("the server's renewal", true)
	webSnap = update(web, webSnap, func(s *pbproxy.Snapshot) {
		s.Certificates.LeafPem, s.Certificates.KeyPem = ca2.leaf(t, "default", "web", time.Now(), time.Hour)
	})
	more("the client's renewal", true)
	// The kept connection, made with the old leaves, lived through it.
	stopKept()
	if n := keptDials.Load(); n != 1 {
		t.Errorf("the kept-alive client dialed %d times, want 1", n)
	}
	pruned := [][]byte{ca2.rootPEM()}
	update(api, apiSnap, func(s *pbproxy.Snapshot) { s.Certificates.RootsPem = pruned })
	update(web, webSnap, func(s *pbproxy.Snapshot) { s.Certificates.RootsPem = pruned })
	more("the pruning", false)
	// The kept connection's client leaf chains to the pruned root alone:
	// the pruning closed it.
	waitFor(t, "the kept connection to be closed", func() bool {
		return testutilCounter(api.Stats().ConnectionsClosedBySnapshot) == 1
	})
	cancel()
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d requests failed during the rotation, the first: %v", n, firstErr.Load())
	}
	t.Logf("%d requests on new connections, %d on the kept one", fresh.Load(), kept.Load())
}

type statusErr struct{ code int }

func (e *statusErr) Error() string { return http.StatusText(e.code) }
