package test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"trellis.dev/trellis/internal/testcluster"
)

// TestSecondaryDatacenterSurvivesLeaderFailover starts a one-server
// primary (dc1) and a three-server secondary (dc2) as separate processes
// with TLS, one cluster CA for both (docs/ca.md, "What an operator hands a
// secondary"), the secondary given the primary's server-to-server address:
// its leader asks there as a server of dc2. dc2's servers link to each
// other on Connect leaves of dc2's own intermediate. A follower of dc2
// signs dc2 leaves that verify against the primary's roots; after dc2's
// leader is killed, its new leader keeps the roots and the intermediate it
// found (every remaining server's leaves carry the same intermediate as
// before), and every remaining server keeps signing.
func TestSecondaryDatacenterSurvivesLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel() // a cluster test without a short TTL: see the package doc
	ctx := context.Background()
	dir := t.TempDir()
	bin := trellisBinary(t)
	pki := filepath.Join(dir, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server", "-dc", "dc1"}, {"tls", "cert", "create", "-server", "-dc", "dc2"}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = pki
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("trellis %v: %v\n%s", args, err, out)
		}
	}
	tlsFlags := func(dc string) []string {
		return []string{"-tls-ca-file", filepath.Join(pki, "trellis-agent-ca.pem"),
			"-tls-cert-file", filepath.Join(pki, dc+"-server-trellis-0.pem"), "-tls-key-file", filepath.Join(pki, dc+"-server-trellis-0-key.pem")}
	}
	var clusters []*testcluster.Cluster
	t.Cleanup(func() {
		for _, c := range clusters {
			c.Stop()
			if t.Failed() {
				for _, m := range c.Members {
					b, _ := os.ReadFile(m.LogPath)
					t.Logf("--- %s log ---\n%s", m.LogPath, tail(b, 3000))
				}
			}
		}
	})
	start := func(name string, servers int, extra ...string) *testcluster.Cluster {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		c, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: d, Servers: servers, Extra: extra})
		if err != nil {
			t.Fatal(err)
		}
		clusters = append(clusters, c)
		return c
	}
	dc1 := start("dc1", 1, tlsFlags("dc1")...)
	var primary rootsAnswer
	waitCA(t, "the primary's root", func() bool {
		primary = caRoots(t, dc1.Members[0])
		return primary.ActiveRootID != ""
	})
	dc2 := start("dc2", 3, append(tlsFlags("dc2"), "-datacenter", "dc2", "-primary-datacenter", "dc1", "-primary-address", dc1.Members[0].ServerAddr)...)
	leader, err := dc2.WaitLeader(ctx, dc2.Members)
	if err != nil {
		t.Fatal(err)
	}
	var rest []*testcluster.Member
	for _, m := range dc2.Members {
		if m != leader {
			rest = append(rest, m)
		}
	}
	follower := rest[0]
	waitCA(t, "the dc2 follower has the primary's roots", func() bool {
		r := caRoots(t, follower)
		return r.ActiveRootID == primary.ActiveRootID && r.TrustDomain == primary.TrustDomain && r.Datacenter == "dc2"
	})
	var before signAnswer
	waitCA(t, "the dc2 follower signs", func() bool {
		var code int
		before, code = signOn(t, follower, dcServiceCSR(t, primary.TrustDomain, "dc2", "web"))
		return code == http.StatusOK
	})
	verifyLeaf(t, primary, before)
	if before.ChainPEM == "" {
		t.Fatal("a dc2 leaf carries no intermediate")
	}
	waitCA(t, "dc2's server links on Connect leaves of its intermediate", func() bool {
		for _, m := range dc2.Members {
			if serverLinks(t, m, "connect") == 0 {
				return false
			}
		}
		return true
	})

	t.Logf("killing dc2's leader %s", leader.Name)
	leader.Kill()
	waitCA(t, "a new leader in dc2", func() bool {
		l, err := dc2.WaitLeader(ctx, rest)
		return err == nil && l != leader
	})
	for _, m := range rest {
		var leaf signAnswer
		waitCA(t, m.Name+" signs after the failover", func() bool {
			var code int
			leaf, code = signOn(t, m, dcServiceCSR(t, primary.TrustDomain, "dc2", "api"))
			return code == http.StatusOK
		})
		verifyLeaf(t, primary, leaf)
		if leaf.ChainPEM != before.ChainPEM {
			t.Errorf("%s signs with another intermediate after the failover: a new leader must keep the one it finds", m.Name)
		}
		if r := caRoots(t, m); r.ActiveRootID != primary.ActiveRootID || len(r.Roots) != 1 {
			t.Errorf("%s after the failover: active %s with %d roots, want the primary's %s alone", m.Name, r.ActiveRootID, len(r.Roots), primary.ActiveRootID)
		}
	}
}

// dcServiceCSR is a CSR for the service's SPIFFE id in datacenter dc.
func dcServiceCSR(t *testing.T, trustDomain, dc, service string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(fmt.Sprintf("spiffe://%s/ns/default/dc/%s/svc/%s", trustDomain, dc, service))
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}
