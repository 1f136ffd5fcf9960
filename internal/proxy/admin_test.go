package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestAdminBeforeASnapshot(t *testing.T) {
	srv := httptest.NewServer(newTestProxy(t).AdminHandler())
	defer srv.Close()
	if code, body := get(t, srv.URL+"/ready"); code != http.StatusServiceUnavailable || body != "not ready: no snapshot yet\n" {
		t.Errorf("/ready: %d %q", code, body)
	}
	if code, _ := get(t, srv.URL+"/config"); code != http.StatusServiceUnavailable {
		t.Errorf("/config: %d", code)
	}
}

func TestAdmin(t *testing.T) {
	c := newTestCA(t, testTD, time.Now())
	p := newTestProxy(t)
	snap := testSnapshot(t, c, "dashboard", "tcp", "127.0.0.1:1")
	snap.Inbound = nil // the inbound listener is not this test's
	snap.Upstreams = []*pbproxy.Upstream{countingUpstream(c, deadAddr(t))}
	if err := p.Update(snap); err != nil {
		t.Fatal(err)
	}
	runProxy(t, p)
	waitAddr(t, p, "upstream default/counting")
	base := "http://" + waitAddr(t, p, adminComponent)

	if code, body := get(t, base+"/ready"); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/ready: %d %q", code, body)
	}
	code, body := get(t, base+"/config")
	if code != http.StatusOK {
		t.Fatalf("/config: %d %s", code, body)
	}
	var got pbproxy.Snapshot
	if err := protojson.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/config is not a snapshot: %v\n%s", err, body)
	}
	if strings.Contains(body, "keyPem") || strings.Contains(body, "PRIVATE KEY") || got.GetCertificates().GetKeyPem() != nil {
		t.Errorf("/config shows the key:\n%s", body)
	}
	if got.GetVersion() != snap.GetVersion() || string(got.GetCertificates().GetLeafPem()) != string(snap.GetCertificates().GetLeafPem()) ||
		got.GetUpstreams()[0].GetService() != "counting" {
		t.Errorf("/config is not the snapshot:\n%s", body)
	}
	if p.Snapshot().GetCertificates().GetKeyPem() == nil {
		t.Error("/config removed the key from the proxy's own snapshot")
	}
	if code, body := get(t, base+"/stats"); code != http.StatusOK || !strings.Contains(body, "trellis_proxy_snapshot_updates_total 1") {
		t.Errorf("/stats: %d\n%s", code, body)
	}

	// A snapshot whose upstream cannot listen (its port taken) is not
	// ready, and /ready names the listener.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	snap2 := snap
	snap2.Version = "v2"
	snap2.Upstreams = []*pbproxy.Upstream{countingUpstream(c, deadAddr(t))}
	snap2.Upstreams[0].BindAddress = taken.Addr().String()
	if err := p.Update(snap2); err != nil {
		t.Fatal(err)
	}
	want := "not ready: the listener of upstream default/counting (" + taken.Addr().String() + ") is not up\n"
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, base+"/ready")
		if code == http.StatusServiceUnavailable && body == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/ready: %d %q, want 503 %q", code, body, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
