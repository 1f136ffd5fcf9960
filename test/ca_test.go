package test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/testcluster"
)

// rootsAnswer is the part of GET /v1/ca/roots this test reads.
type rootsAnswer struct {
	TrustDomain  string `json:"trust_domain"`
	Datacenter   string `json:"datacenter"`
	ActiveRootID string `json:"active_root_id"`
	Roots        []struct {
		ID       string `json:"id"`
		RootCert string `json:"root_cert"`
		Active   bool   `json:"active"`
	} `json:"roots"`
}

// signAnswer is the answer of POST /v1/ca/sign.
type signAnswer struct {
	CertPEM  string `json:"cert_pem"`
	ChainPEM string `json:"chain_pem"`
	Serial   string `json:"serial"`
}

// TestCASigningSurvivesLeaderFailover starts three servers, signs a leaf
// on a follower (with the key that follower holds: its own signature
// count goes up), kills the leader, and checks that the new leader's CA
// manager keeps the one root (no second root, the same active one on
// every server) and that every remaining server keeps signing leaves
// that verify against that root, through the API and through trellis ca
// leaf.
func TestCASigningSurvivesLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	t.Parallel() // a cluster test without a short TTL: see the package doc
	ctx := context.Background()
	dir := t.TempDir()
	bin := trellisBinary(t)
	c, err := testcluster.Start(ctx, testcluster.Options{Bin: bin, Dir: dir, Servers: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, m := range c.Members {
				b, _ := os.ReadFile(m.LogPath)
				t.Logf("--- %s log ---\n%s", m.Name, tail(b, 4000))
			}
		}
	})
	leader, err := c.WaitLeader(ctx, c.Members)
	if err != nil {
		t.Fatal(err)
	}
	var follower *testcluster.Member
	var rest []*testcluster.Member
	for _, m := range c.Members {
		if m != leader {
			rest = append(rest, m)
			if follower == nil {
				follower = m
			}
		}
	}

	var roots rootsAnswer
	waitCA(t, "an active root on the follower", func() bool {
		roots = caRoots(t, follower)
		return roots.ActiveRootID != ""
	})
	if roots.Datacenter != "dc1" || len(roots.Roots) != 1 {
		t.Fatalf("roots on the follower: %+v", roots)
	}
	rootID := roots.ActiveRootID
	csr := serviceCSR(t, roots.TrustDomain, "web")
	waitCA(t, "the follower signs", func() bool {
		leaf, code := signOn(t, follower, csr)
		if code != http.StatusOK {
			return false
		}
		verifyLeaf(t, roots, leaf)
		return true
	})
	if n := signatures(t, follower); n < 1 {
		t.Fatalf("the follower counts %v signatures of its own: it did not sign", n)
	}

	t.Logf("killing leader %s", leader.Name)
	leader.Kill()
	// Right after the kill the others still name the dead leader: wait
	// until they agree on one of themselves.
	var newLeader *testcluster.Member
	waitCA(t, "a new leader among the others", func() bool {
		l, err := c.WaitLeader(ctx, rest)
		if err != nil {
			t.Fatal(err)
		}
		newLeader = l
		return l != leader
	})
	// The new leader's CA manager has run (on gaining leadership) before
	// the roots are judged.
	ran := regexp.MustCompile(`(?m)^trellis_controller_reconciles_total\{controller="ca-manager",result="success"\} [1-9]`)
	if err := testcluster.WaitFor(ctx, 60*time.Second, func() bool { return ran.MatchString(metricsOf(t, newLeader)) }); err != nil {
		t.Fatalf("the new leader %s never ran its CA manager; its controller metrics:\n%s", newLeader.Name, linesWith(metricsOf(t, newLeader), "trellis_controller_"))
	}
	for _, m := range rest {
		var after rootsAnswer
		waitCA(t, m.Name+" answers the roots", func() bool {
			after = caRoots(t, m)
			return after.ActiveRootID != ""
		})
		if after.ActiveRootID != rootID || len(after.Roots) != 1 {
			t.Errorf("%s after the failover: active %s with %d roots, want %s alone", m.Name, after.ActiveRootID, len(after.Roots), rootID)
		}
		var leaf signAnswer
		waitCA(t, m.Name+" signs after the failover", func() bool {
			var code int
			leaf, code = signOn(t, m, serviceCSR(t, roots.TrustDomain, "api"))
			return code == http.StatusOK
		})
		verifyLeaf(t, roots, leaf)
	}

	// The CLI, against the follower that is still a follower or the new
	// leader alike.
	certFile := filepath.Join(dir, "db.pem")
	out, err := exec.Command(bin, "ca", "leaf", "db", "-addr", "http://"+rest[len(rest)-1].HTTPAddr,
		"--cert-file", certFile, "--key-file", filepath.Join(dir, "db-key.pem")).CombinedOutput()
	if err != nil {
		t.Fatalf("trellis ca leaf: %v\n%s", err, out)
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, roots, signAnswer{CertPEM: string(certPEM)})
}

func waitCA(t *testing.T, what string, ok func() bool) {
	t.Helper()
	if err := testcluster.WaitFor(context.Background(), 60*time.Second, ok); err != nil {
		t.Fatalf("never: %s", what)
	}
}

func caRoots(t *testing.T, m *testcluster.Member) rootsAnswer {
	t.Helper()
	var out rootsAnswer
	resp, err := http.Get("http://" + m.HTTPAddr + "/v1/ca/roots")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		_ = json.NewDecoder(resp.Body).Decode(&out)
	}
	return out
}

// signOn asks m to sign csr; the status is 0 when m cannot be reached.
func signOn(t *testing.T, m *testcluster.Member, csr string) (signAnswer, int) {
	t.Helper()
	body, err := json.Marshal(map[string]string{"csr": csr})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+m.HTTPAddr+"/v1/ca/sign", "application/json", bytes.NewReader(body))
	if err != nil {
		return signAnswer{}, 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out signAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("POST /v1/ca/sign on %s: %v: %s", m.Name, err, b)
		}
	} else if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("POST /v1/ca/sign on %s = %d %s", m.Name, resp.StatusCode, b)
	}
	return out, resp.StatusCode
}

func serviceCSR(t *testing.T, trustDomain, service string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(fmt.Sprintf("spiffe://%s/ns/default/dc/dc1/svc/%s", trustDomain, service))
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// verifyLeaf verifies a leaf as a TLS peer does: the roots as the pool,
// what came after the leaf (in cert_pem or chain_pem) as intermediates.
func verifyLeaf(t *testing.T, roots rootsAnswer, leaf signAnswer) {
	t.Helper()
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, r := range roots.Roots {
		pool.AppendCertsFromPEM([]byte(r.RootCert))
	}
	var certs []*x509.Certificate
	rest := []byte(leaf.CertPEM + leaf.ChainPEM)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		t.Fatalf("no certificate in %q", leaf.CertPEM)
	}
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the leaf does not verify against the roots: %v", err)
	}
}

func metricsOf(t *testing.T, m *testcluster.Member) string {
	t.Helper()
	resp, err := http.Get("http://" + m.HTTPAddr + "/v1/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// signatures is the member's own count of leaves signed.
func signatures(t *testing.T, m *testcluster.Member) float64 {
	t.Helper()
	match := regexp.MustCompile(`(?m)^trellis_ca_signatures_total (\S+)$`).FindStringSubmatch(metricsOf(t, m))
	if match == nil {
		return 0
	}
	var n float64
	fmt.Sscan(strings.TrimSpace(match[1]), &n)
	return n
}

func linesWith(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
