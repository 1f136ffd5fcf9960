package ca

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"math/big"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// referenceLeaf is the leaf as SignLeaf made it before the leaf encoder:
// this template given to x509.CreateCertificate. It is the specification
// the encoder is held to.
func referenceLeaf(t *testing.T, csr *x509.CertificateRequest, id Identity, s Signer, ttl time.Duration, now time.Time, serial *big.Int) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              earliest(now.Add(ttl), s.Cert.NotAfter),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		AuthorityKeyId:        s.Cert.SubjectKeyId,
		URIs:                  []*url.URL{id.URI()},
	}
	switch v := id.(type) {
	case ServiceID:
		tmpl.Subject = pkix.Name{CommonName: v.Service}
		tmpl.DNSNames = []string{v.DNSName()}
	case AgentID:
		tmpl.Subject = pkix.Name{CommonName: v.Instance}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.Cert, csr.PublicKey, s.Key)
	if err != nil {
		t.Fatalf("CreateCertificate: %v", err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rootOfKey is a root like NewRoot's, for a key the tests already hold
// (an RSA 4096 key takes seconds to make).
func rootOfKey(t *testing.T, key crypto.Signer, now time.Time, ttl time.Duration) Signer {
	t.Helper()
	skid, err := keyIDBytes(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Trellis CA " + formatKeyID(skid[:8])},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true, MaxPathLen: rootMaxPathLen,
		SubjectKeyId: skid, AuthorityKeyId: skid,
		URIs: []*url.URL{TrustDomainURI(testTD)},
	}
	cert, err := createCert(tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return Signer{Cert: cert, Key: key}
}

// differentFields names the fields of two parsed certificates that
// differ, leaving out those that hold the signature (which ECDSA draws
// at random) and the encodings that contain it.
func differentFields(got, want *x509.Certificate) []string {
	skip := map[string]bool{"Raw": true, "Signature": true}
	var diff []string
	g, w := reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem()
	for i := range g.NumField() {
		name := g.Type().Field(i).Name
		if skip[name] {
			continue
		}
		if !reflect.DeepEqual(g.Field(i).Interface(), w.Field(i).Interface()) {
			diff = append(diff, name)
		}
	}
	return diff
}

// TestLeafEncoderMatchesCreateCertificate holds the leaf encoder to what
// x509.CreateCertificate makes of SignLeaf's former template: for every
// key type the CA signs with, leaf keys of every allowed kind, services
// and agents, a root without a subject key id, a secondary's
// intermediate, and validity on both sides of 2050 (UTCTime then
// GeneralizedTime), the TBSCertificate is the same bytes, every parsed
// field is the same, and the leaf verifies as a TLS peer verifies it.
// RSA PKCS #1 v1.5 signatures are deterministic, so an RSA signer's leaf
// is the same certificate byte for byte.
func TestLeafEncoderMatchesCreateCertificate(t *testing.T) {
	type signerCase struct {
		name  string
		s     Signer
		roots []*x509.Certificate
		now   time.Time
	}
	var signers []signerCase
	for _, kt := range []KeyType{{"ec", 256}, {"ec", 384}, {"rsa", 2048}, {"rsa", 4096}} {
		r := rootOfKey(t, testKey(t, kt), t0, DefaultRootTTL)
		signers = append(signers, signerCase{"root " + kt.String(), r, []*x509.Certificate{r.Cert}, t0})
	}
	p521 := rootOfKey(t, p521Key(t), t0, DefaultRootTTL)
	signers = append(signers, signerCase{"root ec-521", p521, []*x509.Certificate{p521.Cert}, t0})

	// A supplied root may have no subject key id: then leaves carry no
	// authority key id (CreateCertificate gives every CA it makes one, so
	// the certificate is altered in memory; only the signer's view of
	// its own key id matters here).
	base := testRoot(t, DefaultKeyType, 0)
	noSKID := *base.Cert
	noSKID.SubjectKeyId = nil
	signers = append(signers, signerCase{"root without a subject key id", Signer{Cert: &noSKID, Key: base.Key}, []*x509.Certificate{base.Cert}, t0})

	secKey := freshKey(t, DefaultKeyType)
	inter, err := SignIntermediate(mustCSR(t, csrPEM(t, secKey, []string{"spiffe://" + testTD})), base, DefaultIntermediateTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	signers = append(signers, signerCase{"secondary intermediate", Signer{Cert: inter, Key: secKey, Chain: []*x509.Certificate{inter}}, []*x509.Certificate{base.Cert}, t0})

	// Leaves made just before 2050 end after it: not-before is a UTCTime,
	// not-after a GeneralizedTime.
	late := time.Date(2049, 12, 31, 23, 0, 0, 0, time.UTC)
	lateRoot := rootOfKey(t, testKey(t, DefaultKeyType), late.Add(-time.Hour), DefaultRootTTL)
	signers = append(signers, signerCase{"across 2050", lateRoot, []*x509.Certificate{lateRoot.Cert}, late})

	dc2 := func(td string) ServiceID {
		return ServiceID{TrustDomain: td, Namespace: "payments", Datacenter: "dc2", Service: "api-7"}
	}
	for _, sc := range signers {
		li, err := NewLeafIssuer(sc.s)
		if err != nil {
			t.Fatalf("%s: NewLeafIssuer: %v", sc.name, err)
		}
		for _, leafKT := range []KeyType{{"ec", 256}, {"ec", 384}, {"rsa", 2048}} {
			for _, id := range []Identity{
				webID,
				dc2(testTD),
				AgentID{TrustDomain: testTD, Datacenter: testDC, Instance: "i-0a1b2c"},
			} {
				t.Run(sc.name+"/"+leafKT.String()+"/"+id.String(), func(t *testing.T) {
					csr := mustCSR(t, csrPEM(t, testKey(t, leafKT), []string{id.String()}))
					issued, err := li.Issue(csr, id, DefaultLeafTTL, sc.now)
					if err != nil {
						t.Fatalf("Issue: %v", err)
					}
					got, err := x509.ParseCertificate(issued.DER)
					if err != nil {
						t.Fatalf("the leaf does not parse: %v", err)
					}
					want := referenceLeaf(t, csr, id, sc.s, DefaultLeafTTL, sc.now, issued.Serial)
					if !bytes.Equal(got.RawTBSCertificate, want.RawTBSCertificate) {
						t.Errorf("TBSCertificate differs from CreateCertificate's:\n got %x\nwant %x", got.RawTBSCertificate, want.RawTBSCertificate)
					}
					if d := differentFields(got, want); len(d) > 0 {
						t.Errorf("fields differ from CreateCertificate's: %s", strings.Join(d, ", "))
					}
					if _, isRSA := sc.s.Key.Public().(interface{ Size() int }); isRSA && !bytes.Equal(got.Raw, want.Raw) {
						t.Error("an RSA signer's leaf is not CreateCertificate's byte for byte")
					}
					if !issued.NotAfter.Equal(got.NotAfter) || !issued.NotBefore.Equal(got.NotBefore) || issued.Serial.Cmp(got.SerialNumber) != 0 {
						t.Errorf("Issue reported serial %x, %v–%v; the leaf states %x, %v–%v",
							issued.Serial, issued.NotBefore, issued.NotAfter, got.SerialNumber, got.NotBefore, got.NotAfter)
					}
					if _, err := li.Check(issued); err != nil {
						t.Errorf("Check: %v", err)
					}
					chain := EncodeCerts(append([]*x509.Certificate{got}, sc.s.Chain...)...)
					if err := VerifyLeaf(chain, sc.roots, sc.now); err != nil {
						t.Errorf("as a peer verifies it: %v", err)
					}
				})
			}
		}
	}
}

// TestLeafUsesCanonicalKey: crypto/x509 accepts a CSR whose key's
// AlgorithmIdentifier carries a trailing element (and its signature
// verifies); the leaf carries the key as CreateCertificate encodes it,
// never the CSR's bytes.
func TestLeafUsesCanonicalKey(t *testing.T) {
	key := freshKey(t, DefaultKeyType)
	spki, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	var pk struct {
		Alg pkix.AlgorithmIdentifier
		Key asn1.BitString
	}
	if _, err := asn1.Unmarshal(spki, &pk); err != nil {
		t.Fatal(err)
	}
	odd := mustMarshal(struct {
		Alg struct {
			Algorithm  asn1.ObjectIdentifier
			Parameters asn1.RawValue
			Extra      int
		}
		Key asn1.BitString
	}{Alg: struct {
		Algorithm  asn1.ObjectIdentifier
		Parameters asn1.RawValue
		Extra      int
	}{pk.Alg.Algorithm, pk.Alg.Parameters, 7}, Key: pk.Key})
	subject := mustMarshal(pkix.Name{CommonName: "web"}.ToRDNSequence())
	san := mustMarshal(pkix.Extension{Id: oidExtSubjectAltName, Value: mustMarshal([]asn1.RawValue{{Class: 2, Tag: 6, Bytes: []byte(webID.String())}})})
	extReq := mustMarshal(struct {
		Type   asn1.ObjectIdentifier
		Values []asn1.RawValue `asn1:"set"`
	}{asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 14}, []asn1.RawValue{{FullBytes: mustMarshal([]asn1.RawValue{{FullBytes: san}})}}})
	tbs := mustMarshal(struct {
		Version int
		Subject asn1.RawValue
		Key     asn1.RawValue
		Attrs   []asn1.RawValue `asn1:"tag:0"`
	}{0, asn1.RawValue{FullBytes: subject}, asn1.RawValue{FullBytes: odd}, []asn1.RawValue{{FullBytes: extReq}}})
	digest := sha256.Sum256(tbs)
	sig, err := key.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	der := mustMarshal(struct {
		TBS asn1.RawValue
		Alg pkix.AlgorithmIdentifier
		Sig asn1.BitString
	}{asn1.RawValue{FullBytes: tbs}, pkix.AlgorithmIdentifier{Algorithm: oidECDSAWithSHA256}, asn1.BitString{Bytes: sig, BitLength: 8 * len(sig)}})
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Skipf("crypto/x509 no longer parses such a CSR (%v): nothing to guard", err)
	}
	if bytes.Equal(csr.RawSubjectPublicKeyInfo, spki) {
		t.Fatal("the test's CSR has the canonical key encoding; it tests nothing")
	}
	id, err := CheckCSR(csr, CSRPolicy{TrustDomain: testTD, Datacenter: testDC})
	if err != nil {
		t.Fatalf("CheckCSR: %v", err)
	}
	leaf, err := SignLeaf(csr, id, testRoot(t, DefaultKeyType, 0), time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(leaf.RawSubjectPublicKeyInfo, spki) {
		t.Errorf("the leaf's key is encoded as the CSR's %x, not as %x", leaf.RawSubjectPublicKeyInfo, spki)
	}
}

// TestLeafCheckRefuses: Check, the guard that replaces CreateCertificate's
// check of its own signature, refuses a leaf whose signature does not
// verify, one signed by another key, and one that states another serial
// or validity than Issue reported.
func TestLeafCheckRefuses(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 0)
	li, err := NewLeafIssuer(root)
	if err != nil {
		t.Fatal(err)
	}
	csr := mustCSR(t, csrPEM(t, testKey(t, DefaultKeyType), []string{webID.String()}))
	good, err := li.Issue(csr, webID, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := li.Check(good); err != nil {
		t.Fatalf("a good leaf refused: %v", err)
	}
	flipped := good
	flipped.DER = bytes.Clone(good.DER)
	// A bit of the TBSCertificate's serial: the signature no longer
	// covers what the certificate says.
	tbsStart := bytes.Index(flipped.DER, good.Serial.Bytes())
	flipped.DER[tbsStart] ^= 1
	other, err := NewLeafIssuer(testRoot(t, DefaultKeyType, 0))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.Issue(csr, webID, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	misstated := good
	misstated.NotAfter = good.NotAfter.Add(time.Second)
	for name, c := range map[string]struct {
		leaf IssuedLeaf
		says string
	}{
		"a bit flipped":         {flipped, "does not verify"},
		"signed by another key": {foreign, "does not verify"},
		"garbage":               {IssuedLeaf{DER: []byte{0x30, 0}}, "does not parse"},
		"another not-after":     {misstated, "serial and validity"},
	} {
		if _, err := li.Check(c.leaf); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: Check = %v, want an error saying %q", name, err, c.says)
		}
	}
}

func TestNewLeafIssuerRefuses(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 0)
	leaf, err := SignLeaf(mustCSR(t, csrPEM(t, testKey(t, DefaultKeyType), []string{webID.String()})), webID, root, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	edRoot := *root.Cert
	edKey := ed25519Key(t)
	edRoot.PublicKey = edKey.Public()
	for name, c := range map[string]struct {
		s    Signer
		says string
	}{
		"nothing":           {Signer{}, "no CA certificate"},
		"not a CA":          {Signer{Cert: leaf, Key: testKey(t, DefaultKeyType)}, "not a CA"},
		"another key":       {Signer{Cert: root.Cert, Key: freshKey(t, DefaultKeyType)}, "not the certificate's"},
		"an ed25519 signer": {Signer{Cert: &edRoot, Key: edKey}, "neither ECDSA nor RSA"},
	} {
		if _, err := NewLeafIssuer(c.s); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: NewLeafIssuer = %v, want an error saying %q", name, err, c.says)
		}
	}
}

// BenchmarkIssueLeaf is the leaf encoder alone: encode and sign one leaf
// with a P-256 root, with no check of the CSR and none of the signature.
func BenchmarkIssueLeaf(b *testing.B) {
	root := testRoot(b, DefaultKeyType, 0)
	li, err := NewLeafIssuer(root)
	if err != nil {
		b.Fatal(err)
	}
	csr := mustCSR(b, csrPEM(b, testKey(b, DefaultKeyType), []string{webID.String()}))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := li.Issue(csr, webID, DefaultLeafTTL, t0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestLeafSPKI: the ECDSA prefixes the encoder knows in advance are what
// MarshalPKIXPublicKey writes, and a leaf's key is always that encoding.
func TestLeafSPKI(t *testing.T) {
	for _, c := range []struct {
		kt     KeyType
		prefix []byte
	}{{KeyType{"ec", 256}, spkiPrefixP256}, {KeyType{"ec", 384}, spkiPrefixP384}, {KeyType{"rsa", 2048}, nil}} {
		key := testKey(t, c.kt)
		want, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			t.Fatal(err)
		}
		if c.prefix != nil && !bytes.HasPrefix(want, c.prefix) {
			t.Errorf("%s: prefix %x, but MarshalPKIXPublicKey writes %x", c.kt, c.prefix, want)
		}
		got, err := leafSPKI(mustCSR(t, csrPEM(t, key, []string{webID.String()})))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: leafSPKI = %x, %v; want %x", c.kt, got, err, want)
		}
	}
}
