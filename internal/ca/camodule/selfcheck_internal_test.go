package camodule

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
)

func TestCheckDue(t *testing.T) {
	cases := []struct {
		proven bool
		n      uint64
		due    bool
	}{
		{false, 0, true},    // the first leaf of a key
		{false, 1, true},    // signed while the first was being checked
		{false, 5000, true}, // never proven: every leaf
		{true, 0, true},
		{true, 1, false},
		{true, 999, false},
		{true, selfCheckEvery, true},
		{true, 7 * selfCheckEvery, true},
		{true, 7*selfCheckEvery + 1, false},
	}
	for _, c := range cases {
		if got := checkDue(c.proven, c.n); got != c.due {
			t.Errorf("checkDue(proven %v, leaf %d) = %v, want %v", c.proven, c.n, got, c.due)
		}
	}

	// Once proven, one leaf in selfCheckEvery is checked.
	var sc selfCheck
	sc.proven.Store(true)
	checked := 0
	for range 10 * selfCheckEvery {
		if sc.due() {
			checked++
		}
	}
	if checked != 10 {
		t.Errorf("%d of %d leaves checked, want 10", checked, 10*selfCheckEvery)
	}
}

// faultySigner is a signing key gone wrong (a broken HSM, a fault in
// memory): well-formed signatures of another digest than the one asked.
type faultySigner struct{ crypto.Signer }

func (f faultySigner) Sign(r io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	d := bytes.Clone(digest)
	d[0] ^= 1
	return f.Signer.Sign(r, d, opts)
}

// signerWith is a Signer signing with the state of root r, with key as
// the signing key (the root's own or a faulty one), and its metrics and
// log.
func signerWith(t *testing.T, r testRoot, key crypto.Signer) (*Signer, *signMetrics, *bytes.Buffer) {
	t.Helper()
	st, err := buildSigningState(caView{roots: []*pbresource.Resource{r.root(t, "1", true)}, keys: keys(r.signingKey(t, "2", r.key, r.id))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.issuer, err = ca.NewLeafIssuer(ca.Signer{Cert: st.signer.Cert, Key: key}); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	s := NewSigner(SignerConfig{Datacenter: "dc1", Now: func() time.Time { return t0.Add(time.Hour) }, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	m, err := newSignMetrics(prometheus.NewRegistry(), s)
	if err != nil {
		t.Fatal(err)
	}
	s.metrics = m
	s.state.Store(st)
	return s, m, &log
}

func csrPEMOf(t *testing.T, id ca.Identity) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: testCSR(t, id).Raw})
}

// TestSignChecksTheFirstLeafOfAKey: a good key's first leaf is verified,
// the next ones are not (until the sample is due), and every leaf is
// what a peer accepts.
func TestSignChecksTheFirstLeafOfAKey(t *testing.T) {
	r := newTestRoot(t, t0)
	s, m, _ := signerWith(t, r, r.key)
	web := ca.ServiceID{TrustDomain: testTD, Namespace: "default", Datacenter: "dc1", Service: "web"}
	for range 3 {
		leaf, err := s.Sign(t.Context(), csrPEMOf(t, web))
		if err != nil {
			t.Fatal(err)
		}
		certs, err := ca.ParseCerts([]byte(leaf.CertPEM))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ca.VerifyPeer(certs, []*x509.Certificate{r.cert}, t0.Add(time.Hour)); err != nil {
			t.Errorf("a leaf does not verify: %v", err)
		}
		if certs[0].SerialNumber.Text(16) != leaf.Serial || !certs[0].NotAfter.Equal(leaf.NotAfter) {
			t.Errorf("the answer says serial %s, not after %v; the leaf %s, %v", leaf.Serial, leaf.NotAfter, certs[0].SerialNumber.Text(16), certs[0].NotAfter)
		}
	}
	if ok, failed := testutil.ToFloat64(m.selfChecks.WithLabelValues("ok")), testutil.ToFloat64(m.selfChecks.WithLabelValues("failed")); ok != 1 || failed != 0 {
		t.Errorf("self-checks: %v ok, %v failed; want the first leaf alone checked", ok, failed)
	}
}

// TestSignStopsOnAKeyWhoseLeavesDoNotVerify: a key whose leaf does not
// verify hands out no leaf, and signs nothing more on this server: every
// later request is Unavailable (agents then ask another server), the
// failure is logged and counted.
func TestSignStopsOnAKeyWhoseLeavesDoNotVerify(t *testing.T) {
	r := newTestRoot(t, t0)
	s, m, log := signerWith(t, r, faultySigner{r.key})
	web := ca.ServiceID{TrustDomain: testTD, Namespace: "default", Datacenter: "dc1", Service: "web"}
	for i := range 3 {
		leaf, err := s.Sign(t.Context(), csrPEMOf(t, web))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "did not verify") || !strings.Contains(err.Error(), r.id) {
			t.Errorf("request %d: %v, want Unavailable saying root %s's leaf did not verify", i, err, r.id)
		}
		if leaf.CertPEM != "" {
			t.Errorf("request %d handed out a leaf", i)
		}
	}
	if failed := testutil.ToFloat64(m.selfChecks.WithLabelValues("failed")); failed != 1 {
		t.Errorf("%v failed self-checks counted, want 1 (later requests are refused before signing)", failed)
	}
	if signed := testutil.ToFloat64(m.signatures); signed != 0 {
		t.Errorf("%v signatures counted, want none", signed)
	}
	if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "does not verify") {
		t.Errorf("the failure is not logged as an error:\n%s", log.String())
	}

	// A new key (a rotation) starts afresh.
	b := newTestRoot(t, t0)
	st, err := buildSigningState(caView{roots: []*pbresource.Resource{b.root(t, "3", true)}, keys: keys(b.signingKey(t, "4", b.key, b.id))}, s.state.Load())
	if err != nil {
		t.Fatal(err)
	}
	s.state.Store(st)
	if _, err := s.Sign(t.Context(), csrPEMOf(t, web)); err != nil {
		t.Errorf("after a rotation to a good key: %v", err)
	}
}
