package ca

import (
	"bytes"

	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/resource"
)

// t0 is the tests' "now": certificates are judged at fixed times.
var t0 = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// testRoot is a root of testTD made at t0, with its key, as a Signer.
func testRoot(t testing.TB, kt KeyType, ttl time.Duration) Signer {
	t.Helper()
	cert, key, err := NewRoot(RootOptions{TrustDomain: testTD, KeyType: kt, TTL: ttl, Now: t0})
	if err != nil {
		t.Fatalf("NewRoot: %v", err)
	}
	return Signer{Cert: cert, Key: key}
}

// leafOf signs a leaf of id with s and returns it followed by s's chain in
// PEM, as a TLS peer sends it.
func leafOf(t testing.TB, s Signer, id Identity, now time.Time) []byte {
	t.Helper()
	csr := mustCSR(t, csrPEM(t, testKey(t, DefaultKeyType), []string{id.String()}))
	leaf, err := SignLeaf(csr, id, s, DefaultLeafTTL, now)
	if err != nil {
		t.Fatalf("SignLeaf: %v", err)
	}
	return EncodeCerts(append([]*x509.Certificate{leaf}, s.Chain...)...)
}

var webID = ServiceID{TrustDomain: testTD, Namespace: "default", Datacenter: testDC, Service: "web"}

func TestNewRoot(t *testing.T) {
	for _, kt := range []KeyType{{"ec", 256}, {"ec", 384}, {"rsa", 2048}} {
		t.Run(kt.String(), func(t *testing.T) {
			root := testRoot(t, kt, 24*time.Hour)
			c := root.Cert
			if !c.IsCA || !c.BasicConstraintsValid || c.MaxPathLen != rootMaxPathLen {
				t.Errorf("IsCA %v, MaxPathLen %d", c.IsCA, c.MaxPathLen)
			}
			if c.KeyUsage&x509.KeyUsageCertSign == 0 {
				t.Error("the root may not sign certificates")
			}
			if len(c.URIs) != 1 || c.URIs[0].String() != "spiffe://"+testTD {
				t.Errorf("URIs %v", c.URIs)
			}
			id, _ := KeyID(c.PublicKey)
			if formatKeyID(c.SubjectKeyId) != id {
				t.Errorf("SubjectKeyId %x is not the key id %s", c.SubjectKeyId, id)
			}
			if want := "Trellis CA " + id[:23]; c.Subject.CommonName != want {
				t.Errorf("CN %q, want %q", c.Subject.CommonName, want)
			}
			if !c.NotBefore.Equal(t0.Add(-time.Minute)) || !c.NotAfter.Equal(t0.Add(24*time.Hour)) {
				t.Errorf("validity %v - %v", c.NotBefore, c.NotAfter)
			}
			if got, _ := KeyTypeOf(root.Key.Public()); got != kt {
				t.Errorf("key type %v", got)
			}
			if err := c.CheckSignatureFrom(c); err != nil {
				t.Errorf("not self-signed: %v", err)
			}
		})
	}
	def := testRoot(t, KeyType{}, 0)
	if got, _ := KeyTypeOf(def.Cert.PublicKey); got != DefaultKeyType {
		t.Errorf("default key type %v", got)
	}
	if !def.Cert.NotAfter.Equal(t0.Add(DefaultRootTTL)) {
		t.Errorf("default TTL: not after %v", def.Cert.NotAfter)
	}

	for name, c := range map[string]struct {
		o    RootOptions
		says string
	}{
		"no trust domain":    {RootOptions{Now: t0}, "trust domain"},
		"upper trust domain": {RootOptions{TrustDomain: "TD.trellis", Now: t0}, "trust domain"},
		"bad key type":       {RootOptions{TrustDomain: testTD, KeyType: KeyType{"rsa", 1024}, Now: t0}, "key bits"},
		"negative ttl":       {RootOptions{TrustDomain: testTD, TTL: -time.Hour, Now: t0}, "ttl"},
		"no time":            {RootOptions{TrustDomain: testTD}, "now"},
	} {
		if _, _, err := NewRoot(c.o); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: NewRoot = %v, want an error naming %q", name, err, c.says)
		}
	}
}

func TestCertsPEM(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 0).Cert
	certs, err := ParseCerts(EncodeCerts(root, root))
	if err != nil || len(certs) != 2 || !bytes.Equal(certs[1].Raw, root.Raw) {
		t.Fatalf("ParseCerts(EncodeCerts) = %d certs, %v", len(certs), err)
	}
	for name, c := range map[string]struct {
		data []byte
		says string
	}{
		"not PEM":  {[]byte("nope"), "not PEM"},
		"only key": {pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}), "no PEM CERTIFICATE"},
		"garbage":  {pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2}}), "certificate 1"},
	} {
		if _, err := ParseCerts(c.data); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: ParseCerts = %v, want an error saying %q", name, err, c.says)
		}
	}
}

// TestRotationChains verifies leaves the way a TLS peer does, before and
// after a rotation from root A to root B, with old-only, new-only and
// both-roots pools.
func TestRotationChains(t *testing.T) {
	cases := []struct{ a, b KeyType }{
		{KeyType{"ec", 256}, KeyType{"ec", 256}},
		{KeyType{"ec", 384}, KeyType{"ec", 384}},
		{KeyType{"rsa", 2048}, KeyType{"rsa", 2048}},
		// Changing the key type is a rotation too.
		{KeyType{"ec", 256}, KeyType{"rsa", 2048}},
		{KeyType{"rsa", 2048}, KeyType{"ec", 384}},
	}
	for _, c := range cases {
		t.Run(c.a.String()+"->"+c.b.String(), func(t *testing.T) {
			a := testRoot(t, c.a, 0)
			leafA := leafOf(t, a, webID, t0)
			mustVerify(t, "leaf of A, pool {A}", leafA, t0, a.Cert)

			// A day later, rotate to B, cross-signed by A.
			later := t0.Add(24 * time.Hour)
			bCert, bKey, err := NewRoot(RootOptions{TrustDomain: testTD, KeyType: c.b, Now: later})
			if err != nil {
				t.Fatal(err)
			}
			cross, err := CrossSign(bCert, a, later)
			if err != nil {
				t.Fatalf("CrossSign: %v", err)
			}
			if !bytes.Equal(cross.SubjectKeyId, bCert.SubjectKeyId) || !bytes.Equal(cross.RawSubject, bCert.RawSubject) {
				t.Fatal("the cross-signed certificate does not name B's subject and key id")
			}
			if !bytes.Equal(cross.AuthorityKeyId, a.Cert.SubjectKeyId) {
				t.Fatal("the cross-signed certificate does not name A as its authority")
			}
			b := Signer{Cert: bCert, Key: bKey, Chain: []*x509.Certificate{cross}}
			leafB := leafOf(t, b, webID, later)

			mustVerify(t, "leaf of B with [crossB], pool {A}", leafB, later, a.Cert)
			mustVerify(t, "leaf of B with [crossB], pool {B}", leafB, later, bCert)
			mustVerify(t, "leaf of B with [crossB], pool {A,B}", leafB, later, a.Cert, bCert)
			mustVerify(t, "leaf of A, pool {A,B}", leafA, later, a.Cert, bCert)

			// The cross-signed certificate is what makes A's peers accept
			// B's leaves: without it they refuse.
			bare := leafOf(t, Signer{Cert: bCert, Key: bKey}, webID, later)
			mustNotVerify(t, "leaf of B without the chain, pool {A}", bare, later, a.Cert)
			mustVerify(t, "leaf of B without the chain, pool {B}", bare, later, bCert)
			// And a peer that trusts only B does not accept A's leaves.
			mustNotVerify(t, "leaf of A, pool {B}", leafA, later, bCert)
		})
	}
}

func TestCrossSignLimits(t *testing.T) {
	a := testRoot(t, DefaultKeyType, 30*24*time.Hour)
	bCert, _, err := NewRoot(RootOptions{TrustDomain: testTD, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	cross, err := CrossSign(bCert, a, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !cross.NotAfter.Equal(a.Cert.NotAfter) {
		t.Errorf("cross-signed until %v, beyond the old root's %v", cross.NotAfter, a.Cert.NotAfter)
	}
	if _, err := CrossSign(a.Cert, a, t0); err == nil || !strings.Contains(err.Error(), "old root's key") {
		t.Errorf("cross-signing a root with its own key: %v", err)
	}
	if _, err := CrossSign(bCert, a, t0.Add(31*24*time.Hour)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("cross-signing with an expired root: %v", err)
	}
	if _, err := CrossSign(nil, a, t0); err == nil {
		t.Error("cross-signing nothing succeeded")
	}
}

// TestSecondaryChains: a secondary datacenter's intermediate is signed by
// the primary root, and its leaves verify against the primary root alone,
// also after the primary rotates.
func TestSecondaryChains(t *testing.T) {
	a := testRoot(t, DefaultKeyType, 0)
	secKey := freshKey(t, DefaultKeyType)
	interCSR := mustCSR(t, csrPEM(t, secKey, []string{"spiffe://" + testTD}))
	inter, err := SignIntermediate(interCSR, a, DefaultIntermediateTTL, t0)
	if err != nil {
		t.Fatalf("SignIntermediate: %v", err)
	}
	if !inter.IsCA || inter.MaxPathLen != 0 || !inter.MaxPathLenZero {
		t.Errorf("intermediate: IsCA %v MaxPathLen %d zero %v", inter.IsCA, inter.MaxPathLen, inter.MaxPathLenZero)
	}
	if len(inter.URIs) != 1 || inter.URIs[0].String() != "spiffe://"+testTD {
		t.Errorf("intermediate URIs %v", inter.URIs)
	}
	if !inter.NotAfter.Equal(t0.Add(DefaultIntermediateTTL)) {
		t.Errorf("intermediate not after %v", inter.NotAfter)
	}
	dc2 := ServiceID{TrustDomain: testTD, Namespace: "default", Datacenter: "dc2", Service: "api"}
	sec := Signer{Cert: inter, Key: secKey, Chain: []*x509.Certificate{inter}}
	leaf := leafOf(t, sec, dc2, t0)
	mustVerify(t, "secondary leaf, pool {primary root}", leaf, t0, a.Cert)

	// The intermediate signs leaves only: a leaf below a CA it signed is
	// refused by peers.
	subKey := freshKey(t, DefaultKeyType)
	sub, err := SignIntermediate(mustCSR(t, csrPEM(t, subKey, nil)), sec, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	deep := leafOf(t, Signer{Cert: sub, Key: subKey, Chain: []*x509.Certificate{sub, inter}}, dc2, t0)
	mustNotVerify(t, "a leaf below a CA the secondary's intermediate signed", deep, t0, a.Cert)

	// The primary rotates to B; the secondary gets a new intermediate
	// from B and sends it with B cross-signed by A.
	later := t0.Add(time.Hour)
	bCert, bKey, err := NewRoot(RootOptions{TrustDomain: testTD, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	cross, err := CrossSign(bCert, a, later)
	if err != nil {
		t.Fatal(err)
	}
	inter2, err := SignIntermediate(interCSR, Signer{Cert: bCert, Key: bKey}, DefaultIntermediateTTL, later)
	if err != nil {
		t.Fatal(err)
	}
	sec2 := Signer{Cert: inter2, Key: secKey, Chain: []*x509.Certificate{inter2, cross}}
	leaf2 := leafOf(t, sec2, dc2, later)
	mustVerify(t, "secondary leaf after rotation, pool {A}", leaf2, later, a.Cert)
	mustVerify(t, "secondary leaf after rotation, pool {B}", leaf2, later, bCert)
	mustVerify(t, "secondary leaf before rotation, pool {A,B}", leaf, later, a.Cert, bCert)
}

func TestSignIntermediateRefuses(t *testing.T) {
	a := testRoot(t, DefaultKeyType, 0)
	block, _ := pem.Decode(csrPEM(t, testKey(t, DefaultKeyType), nil))
	block.Bytes[len(block.Bytes)-1] ^= 1
	tampered, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var r *Refusal
	if _, err := SignIntermediate(tampered, a, time.Hour, t0); !errors.As(err, &r) || r.Reason != ReasonBadSignature {
		t.Errorf("tampered CSR: %v", err)
	}
	small := mustCSR(t, csrPEM(t, freshKey1024(t), nil))
	if _, err := SignIntermediate(small, a, time.Hour, t0); !errors.As(err, &r) || r.Reason != ReasonKeyType {
		t.Errorf("RSA 1024 CSR: %v", err)
	}
	good := mustCSR(t, csrPEM(t, testKey(t, DefaultKeyType), nil))
	if _, err := SignIntermediate(good, a, 0, t0); err == nil {
		t.Error("zero TTL accepted")
	}
	long, err := SignIntermediate(good, a, 2*DefaultRootTTL, t0)
	if err != nil || !long.NotAfter.Equal(a.Cert.NotAfter) {
		t.Errorf("an intermediate outliving its root: %v, %v", long.NotAfter, err)
	}
}

func TestLeafFields(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 10*24*time.Hour)
	key := testKey(t, KeyType{"ec", 384})
	csr := mustCSR(t, csrPEM(t, key, []string{webID.String()}))
	leaf, err := SignLeaf(csr, webID, root, DefaultLeafTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.NotBefore.Equal(t0.Add(-time.Minute)) {
		t.Errorf("not before %v, want a minute before now", leaf.NotBefore)
	}
	if !leaf.NotAfter.Equal(t0.Add(DefaultLeafTTL)) {
		t.Errorf("not after %v, want now + ttl", leaf.NotAfter)
	}
	if leaf.IsCA || !leaf.BasicConstraintsValid {
		t.Error("the leaf is a CA, or says nothing about it")
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
		t.Errorf("key usage %b", leaf.KeyUsage)
	}
	if len(leaf.ExtKeyUsage) != 2 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Errorf("ext key usage %v", leaf.ExtKeyUsage)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != webID.String() {
		t.Errorf("URIs %v", leaf.URIs)
	}
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "web.svc.default.dc1.trellis" {
		t.Errorf("DNS names %v", leaf.DNSNames)
	}
	if !bytes.Equal(leaf.AuthorityKeyId, root.Cert.SubjectKeyId) {
		t.Error("the authority key id is not the signer's")
	}
	if !samePublicKey(leaf.PublicKey, key.Public()) {
		t.Error("the leaf is not for the CSR's key")
	}

	agent := AgentID{TrustDomain: testTD, Datacenter: testDC, Instance: "i-7"}
	aleaf, err := SignLeaf(mustCSR(t, csrPEM(t, key, []string{agent.String()})), agent, root, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(aleaf.DNSNames) != 0 || aleaf.URIs[0].String() != agent.String() {
		t.Errorf("agent leaf: DNS %v URIs %v", aleaf.DNSNames, aleaf.URIs)
	}

	// A TTL beyond the signer is cut at the signer's end.
	capped, err := SignLeaf(csr, webID, root, 30*24*time.Hour, t0)
	if err != nil || !capped.NotAfter.Equal(root.Cert.NotAfter) {
		t.Errorf("capped leaf: not after %v (signer %v), %v", capped.NotAfter, root.Cert.NotAfter, err)
	}

	// What a CSR asks for beyond its key and URI is not granted.
	greedy := mustCSR(t, csrPEM(t, key, []string{webID.String()}, basicConstraintsExt(t, true)))
	gleaf, err := SignLeaf(greedy, webID, root, time.Hour, t0)
	if err != nil || gleaf.IsCA {
		t.Errorf("a CSR asking for CA got IsCA=%v, %v", gleaf.IsCA, err)
	}
}

func TestLeafSerials(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 0)
	csr := mustCSR(t, csrPEM(t, testKey(t, DefaultKeyType), []string{webID.String()}))
	floor := new(big.Int).Lsh(big.NewInt(1), 64)
	ceil := new(big.Int).Lsh(big.NewInt(1), 128)
	seen := map[string]bool{}
	for range 300 {
		leaf, err := SignLeaf(csr, webID, root, time.Hour, t0)
		if err != nil {
			t.Fatal(err)
		}
		s := leaf.SerialNumber
		if s.Cmp(floor) < 0 || s.Cmp(ceil) >= 0 {
			t.Fatalf("serial %x is outside [2^64, 2^128)", s)
		}
		if seen[s.String()] {
			t.Fatalf("serial %x twice", s)
		}
		seen[s.String()] = true
	}
}

func TestSignLeafRefuses(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 24*time.Hour)
	csr := mustCSR(t, csrPEM(t, testKey(t, DefaultKeyType), []string{webID.String()}))
	leaf, err := SignLeaf(csr, webID, root, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	other := freshKey(t, DefaultKeyType)
	cases := []struct {
		name string
		s    Signer
		id   Identity
		ttl  time.Duration
		now  time.Time
		says string
	}{
		{"no signer", Signer{}, webID, time.Hour, t0, "no CA certificate"},
		{"signer not a CA", Signer{Cert: leaf, Key: testKey(t, DefaultKeyType)}, webID, time.Hour, t0, "not a CA"},
		{"key not the signer's", Signer{Cert: root.Cert, Key: other}, webID, time.Hour, t0, "not the certificate's"},
		{"signer expired", root, webID, time.Hour, t0.Add(25 * time.Hour), "expired"},
		{"signer not yet valid", root, webID, time.Hour, t0.Add(-time.Hour), "not valid before"},
		{"no time", root, webID, time.Hour, time.Time{}, "now"},
		{"zero ttl", root, webID, 0, t0, "ttl"},
		{"no identity", root, nil, time.Hour, t0, "identity"},
	}
	for _, c := range cases {
		if _, err := SignLeaf(csr, c.id, c.s, c.ttl, c.now); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: SignLeaf = %v, want an error saying %q", c.name, err, c.says)
		}
	}
}

func TestCheckSuppliedRoot(t *testing.T) {
	root := testRoot(t, KeyType{"ec", 384}, 24*time.Hour)
	certPEM := EncodeCerts(root.Cert)
	keyPEM, err := EncodeKey(root.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := CheckSuppliedRoot(certPEM, keyPEM, t0)
	if err != nil || !cert.Equal(root.Cert) || !samePublicKey(key.Public(), root.Cert.PublicKey) {
		t.Fatalf("a good root refused: %v", err)
	}

	otherPEM, _ := EncodeKey(freshKey(t, KeyType{"ec", 384}))
	csr := mustCSR(t, csrPEM(t, testKey(t, DefaultKeyType), []string{webID.String()}))
	leaf, err := SignLeaf(csr, webID, root, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	leafKeyPEM, _ := EncodeKey(testKey(t, DefaultKeyType))
	cases := []struct {
		name              string
		cert, key         []byte
		now               time.Time
		field, says       string
		mustNotQuoteBytes []byte
	}{
		{"cert not PEM", []byte("garbage"), keyPEM, t0, "root_cert", "not PEM", nil},
		{"two certs", EncodeCerts(root.Cert, root.Cert), keyPEM, t0, "root_cert", "2 certificates", nil},
		{"not a CA", EncodeCerts(leaf), leafKeyPEM, t0, "root_cert", "not a CA", nil},
		{"expired", certPEM, keyPEM, t0.Add(25 * time.Hour), "root_cert", "expired", nil},
		{"not yet valid", certPEM, keyPEM, t0.Add(-time.Hour), "root_cert", "not valid before", nil},
		{"key not PEM", certPEM, []byte("secret-key-bytes"), t0, "private_key", "not PEM", []byte("secret-key-bytes")},
		{"key of another", certPEM, otherPEM, t0, "private_key", "not the key", otherPEM},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := CheckSuppliedRoot(c.cert, c.key, c.now)
			var fe *resource.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *resource.FieldError", err)
			}
			if fe.Field != c.field || !strings.Contains(fe.Reason, c.says) {
				t.Fatalf("refused %q: %q; want field %q saying %q", fe.Field, fe.Reason, c.field, c.says)
			}
			if c.mustNotQuoteBytes != nil && strings.Contains(err.Error(), string(c.mustNotQuoteBytes)) {
				t.Fatal("the error quotes the key")
			}
		})
	}
}

func TestVerifyLeafRefuses(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 0)
	other := testRoot(t, DefaultKeyType, 0)
	leaf := leafOf(t, root, webID, t0)
	if err := VerifyLeaf(leaf, []*x509.Certificate{other.Cert}, t0); err == nil {
		t.Error("a leaf verified against a foreign root")
	}
	if err := VerifyLeaf(leaf, []*x509.Certificate{root.Cert}, t0.Add(DefaultLeafTTL+time.Second)); err == nil {
		t.Error("an expired leaf verified")
	}
	if err := VerifyLeaf(leaf, nil, t0); err == nil {
		t.Error("a leaf verified against no roots")
	}
	if err := VerifyLeaf([]byte("x"), []*x509.Certificate{root.Cert}, t0); err == nil {
		t.Error("garbage verified")
	}
	id, err := VerifyPeer(mustCerts(t, leaf), []*x509.Certificate{root.Cert}, t0)
	if err != nil || id != webID {
		t.Errorf("VerifyPeer = %v, %v", id, err)
	}
}

// BenchmarkSignLeaf is the cost of one signature as the signing service
// pays it: check a P-256 CSR (its signature verified) and sign its leaf
// with a P-256 root through the leaf encoder, with the signing key's
// LeafIssuer built once, as a server builds it once per key. It is the
// ceiling a server's signatures per second cannot pass on one core. The
// service's check of its own leaves (one in 1,000 once a key is proven)
// adds about 0.1 µs a leaf and is left out; so is SignLeaf's check of
// every leaf, which the service does not make.
func BenchmarkSignLeaf(b *testing.B) {
	root := testRoot(b, DefaultKeyType, 0)
	li, err := NewLeafIssuer(root)
	if err != nil {
		b.Fatal(err)
	}
	csr := mustCSR(b, csrPEM(b, testKey(b, DefaultKeyType), []string{webID.String()}))
	policy := CSRPolicy{TrustDomain: testTD, Datacenter: testDC}
	b.ReportAllocs()
	for b.Loop() {
		id, err := CheckCSR(csr, policy)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := li.Issue(csr, id, DefaultLeafTTL, t0); err != nil {
			b.Fatal(err)
		}
	}
}

func mustVerify(t *testing.T, what string, chainPEM []byte, now time.Time, roots ...*x509.Certificate) {
	t.Helper()
	if err := VerifyLeaf(chainPEM, roots, now); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

func mustNotVerify(t *testing.T, what string, chainPEM []byte, now time.Time, roots ...*x509.Certificate) {
	t.Helper()
	if err := VerifyLeaf(chainPEM, roots, now); err == nil {
		t.Errorf("%s: verified, want a refusal", what)
	}
}

func mustCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	c, err := ParseCerts(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// BenchmarkCheckCSR is the CSR's share of BenchmarkSignLeaf: mostly the
// verification of its signature.
func BenchmarkCheckCSR(b *testing.B) {
	csr := mustCSR(b, csrPEM(b, testKey(b, DefaultKeyType), []string{webID.String()}))
	policy := CSRPolicy{TrustDomain: testTD, Datacenter: testDC}
	for b.Loop() {
		if _, err := CheckCSR(csr, policy); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSignIntermediateTrustDomain(t *testing.T) {
	a := testRoot(t, DefaultKeyType, 0)
	key := testKey(t, DefaultKeyType)
	var r *Refusal
	cases := []struct {
		name   string
		uris   []string
		reason string
	}{
		{"foreign trust domain", []string{"spiffe://other.trellis"}, ReasonTrustDomain},
		{"a service id", []string{webID.String()}, ReasonNotSPIFFE},
		{"not SPIFFE", []string{"https://" + testTD}, ReasonNotSPIFFE},
		{"two", []string{"spiffe://" + testTD, "spiffe://" + testTD}, ReasonURISANCount},
	}
	for _, c := range cases {
		_, err := SignIntermediate(mustCSR(t, csrPEM(t, key, c.uris)), a, time.Hour, t0)
		if !errors.As(err, &r) || r.Reason != c.reason {
			t.Errorf("%s: %v, want reason %s", c.name, err, c.reason)
		}
	}

	// A supplied root without a SPIFFE URI: the CSR's names the domain.
	bare := *a.Cert
	bare.URIs = nil
	noURI, err := createCert(&bare, &bare, a.Key.Public(), a.Key)
	if err != nil {
		t.Fatal(err)
	}
	s := Signer{Cert: noURI, Key: a.Key}
	inter, err := SignIntermediate(mustCSR(t, csrPEM(t, key, []string{"spiffe://" + testTD})), s, time.Hour, t0)
	if err != nil || len(inter.URIs) != 1 || inter.URIs[0].Host != testTD {
		t.Errorf("intermediate of a root without a URI: %v, %v", inter, err)
	}
	if _, err := SignIntermediate(mustCSR(t, csrPEM(t, key, nil)), s, time.Hour, t0); err == nil {
		t.Error("an intermediate with no trust domain anywhere was signed")
	}
}
