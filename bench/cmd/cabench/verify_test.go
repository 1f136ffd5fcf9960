package main

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/ca"
)

const (
	testTD = "11111111-2222-3333-4444-555555555555.trellis"
	testDC = "dc1"
)

// signed signs req's CSR with root as the signing service does and
// returns the answer it would give.
func signed(t *testing.T, root ca.Signer, req request, now time.Time) *pbca.SignResponse {
	t.Helper()
	csr, err := ca.ParseCSR([]byte(req.csrPEM))
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.CheckCSR(csr, ca.CSRPolicy{TrustDomain: testTD, Datacenter: testDC})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.SignLeaf(csr, id, root, ca.DefaultLeafTTL, now)
	if err != nil {
		t.Fatal(err)
	}
	return &pbca.SignResponse{CertPem: string(ca.EncodeCerts(leaf)), Serial: leaf.SerialNumber.Text(16)}
}

func rootsOf(s ca.Signer) []*x509.Certificate { return []*x509.Certificate{s.Cert} }

// TestVerifyLeaves: the benchmark's check accepts the leaves of the
// roots it is given and refuses a foreign root's leaf, a leaf for
// another CSR's key or id, and a serial the answer misstates.
func TestVerifyLeaves(t *testing.T) {
	now := time.Now()
	newSigner := func() ca.Signer {
		cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: testTD, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return ca.Signer{Cert: cert, Key: key}
	}
	root, foreign := newSigner(), newSigner()
	reqs, _, _, err := newRequests(2, testTD, testDC)
	if err != nil {
		t.Fatal(err)
	}
	good := sample{req: &reqs[0], resp: signed(t, root, reqs[0], now)}
	if n, err := verifyLeaves(rootsOf(root), []sample{good}, now); n != 1 || err != nil {
		t.Fatalf("a good leaf: %d verified, %v", n, err)
	}
	sameID, err := newRequest(reqs[0].id) // the same id, another key
	if err != nil {
		t.Fatal(err)
	}
	misstated := &pbca.SignResponse{CertPem: good.resp.GetCertPem(), Serial: "1"}
	cases := []struct {
		name string
		s    sample
		want string
	}{
		{"a foreign root's leaf", sample{req: &reqs[0], resp: signed(t, foreign, reqs[0], now)}, "unknown authority"},
		{"another CSR's leaf", sample{req: &reqs[1], resp: good.resp}, "asked for"},
		{"a leaf of another key", sample{req: &sameID, resp: good.resp}, "public key"},
		{"a misstated serial", sample{req: &reqs[0], resp: misstated}, "serial"},
		{"garbage", sample{req: &reqs[0], resp: &pbca.SignResponse{CertPem: "not a certificate"}}, "leaf 0"},
	}
	for _, c := range cases {
		n, err := verifyLeaves(rootsOf(root), []sample{c.s}, now)
		if n != 0 || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %d verified, %v; want a refusal mentioning %q", c.name, n, err, c.want)
		}
	}
	if _, err := verifyLeaves(rootsOf(root), nil, now); err == nil {
		t.Error("no leaf at all verified")
	}
}
