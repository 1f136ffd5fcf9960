package ca

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	pbca "trellis.dev/trellis/api/ca/v1"
)

func caExtension(t *testing.T, isCA bool) pkix.Extension {
	t.Helper()
	v, err := asn1.Marshal(struct {
		IsCA bool `asn1:"optional"`
	}{isCA})
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: oidBasicConstraints, Critical: true, Value: v}
}

// The primary signs an intermediate only for a CA request of its trust
// domain and a datacenter other than its own; each refusal names the
// field and the reason.
func TestCheckIntermediateCSR(t *testing.T) {
	key := testKey(t, DefaultKeyType)
	good, err := NewIntermediateCSR(key, testTD, "dc2")
	if err != nil {
		t.Fatal(err)
	}
	p := IntermediatePolicy{TrustDomain: testTD, PrimaryDatacenter: "dc1"}
	otherTD := "22222222-2222-4222-8222-222222222222.trellis"
	tests := []struct {
		name          string
		csr           []byte
		dc            string
		reason, field string
		says          string
	}{
		{name: "accepted", csr: good, dc: "dc2"},
		{name: "no datacenter", csr: good, dc: "", reason: ReasonDatacenter, field: FieldDatacenter, says: "missing"},
		{name: "datacenter not a label", csr: good, dc: "DC_2", reason: ReasonDatacenter, field: FieldDatacenter, says: "not a datacenter name"},
		{name: "the primary's own datacenter", csr: good, dc: "dc1", reason: ReasonDatacenter, field: FieldDatacenter, says: "primary's own"},
		{name: "a leaf's CSR", csr: csrPEM(t, key, []string{"spiffe://" + testTD}), dc: "dc2", reason: ReasonNotCARequest, field: "csr.extensions", says: "does not ask for a CA"},
		{name: "CA=false asked", csr: csrPEM(t, key, []string{"spiffe://" + testTD}, caExtension(t, false)), dc: "dc2", reason: ReasonNotCARequest, field: "csr.extensions"},
		{name: "no URI SAN", csr: csrPEM(t, key, nil, caExtension(t, true)), dc: "dc2", reason: ReasonURISANCount, field: "csr.uri_san", says: "0 URI SANs"},
		{name: "two URI SANs", csr: csrPEM(t, key, []string{"spiffe://" + testTD, "spiffe://" + otherTD}, caExtension(t, true)), dc: "dc2", reason: ReasonURISANCount, field: "csr.uri_san"},
		{name: "a service id", csr: csrPEM(t, key, []string{svcURI(testTD, "dc2", "web")}, caExtension(t, true)), dc: "dc2", reason: ReasonNotSPIFFE, field: "csr.uri_san"},
		{name: "another trust domain", csr: csrPEM(t, key, []string{"spiffe://" + otherTD}, caExtension(t, true)), dc: "dc2", reason: ReasonTrustDomain, field: "csr.uri_san", says: otherTD},
		{name: "RSA 1024", csr: csrPEM(t, freshKey1024(t), []string{"spiffe://" + testTD}, caExtension(t, true)), dc: "dc2", reason: ReasonKeyType, field: "csr.public_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckIntermediateCSR(mustCSR(t, tt.csr), tt.dc, p)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var r *Refusal
			if !errors.As(err, &r) || r.Reason != tt.reason || r.Field != tt.field || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("CheckIntermediateCSR = %v, want a refusal %s of %s saying %q", err, tt.reason, tt.field, tt.says)
			}
		})
	}
	if err := CheckIntermediateCSR(nil, "dc2", p); err == nil {
		t.Error("a nil CSR was accepted")
	}
}

// An intermediate the primary signs for the secondary's CSR passes the
// secondary's check, carries the trust domain, signs leaves only, and a
// leaf of the secondary signed with it verifies against the root; an
// intermediate of another key or another root does not pass.
func TestIntermediateRoundTrip(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 0)
	key := freshKey(t, DefaultKeyType)
	csrData, err := NewIntermediateCSR(key, testTD, "dc2")
	if err != nil {
		t.Fatal(err)
	}
	csr := mustCSR(t, csrData)
	if err := CheckIntermediateCSR(csr, "dc2", IntermediatePolicy{TrustDomain: testTD, PrimaryDatacenter: "dc1"}); err != nil {
		t.Fatal(err)
	}
	inter, err := SignIntermediate(csr, root, DefaultIntermediateTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	got, chain, err := CheckIntermediate(EncodeCerts(inter), nil, key.Public(), root.Cert, t0)
	if err != nil || !got.Equal(inter) || len(chain) != 0 {
		t.Fatalf("CheckIntermediate = %v, %v, %v", got, chain, err)
	}
	if !inter.MaxPathLenZero || len(inter.URIs) != 1 || inter.URIs[0].String() != "spiffe://"+testTD {
		t.Errorf("intermediate: MaxPathLenZero %v, URIs %v", inter.MaxPathLenZero, inter.URIs)
	}
	id := ServiceID{TrustDomain: testTD, Namespace: "default", Datacenter: "dc2", Service: "web"}
	leafCSR := mustCSR(t, csrPEM(t, freshKey(t, DefaultKeyType), []string{id.String()}))
	leaf, err := SignLeaf(leafCSR, id, Signer{Cert: inter, Key: key, Chain: []*x509.Certificate{inter}}, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyLeaf(EncodeCerts(leaf, inter), []*x509.Certificate{root.Cert}, t0); err != nil {
		t.Errorf("a leaf of the intermediate: %v", err)
	}

	if _, _, err := CheckIntermediate(EncodeCerts(inter), nil, freshKey(t, DefaultKeyType).Public(), root.Cert, t0); err == nil || !strings.Contains(err.Error(), "not a certificate of the key") {
		t.Errorf("another key's intermediate: %v", err)
	}
	other := testRoot(t, DefaultKeyType, 0)
	if _, _, err := CheckIntermediate(EncodeCerts(inter), nil, key.Public(), other.Cert, t0); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("an intermediate of another root: %v", err)
	}
	if _, _, err := CheckIntermediate([]byte("nope"), nil, key.Public(), root.Cert, t0); err == nil || !strings.Contains(err.Error(), "cert_pem") {
		t.Errorf("not PEM: %v", err)
	}
}

// A secondary needs a new intermediate when it has none, when the
// primary's active root changed, when its intermediate is another root's,
// and from half its life on.
func TestIntermediateReason(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 0)
	rootID, _ := KeyID(root.Cert.PublicKey)
	other := testRoot(t, DefaultKeyType, 0)
	key := freshKey(t, DefaultKeyType)
	csr := mustCSR(t, mustIntermediateCSR(t, key))
	inter, err := SignIntermediate(csr, root, 10*24*time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	half := RenewAt(inter.NotBefore, inter.NotAfter)
	tests := []struct {
		name         string
		primaryID    string
		primaryRoot  *x509.Certificate
		localID      string
		intermediate *x509.Certificate
		now          time.Time
		want         string
	}{
		{"none yet", rootID, root.Cert, "", nil, t0, "no intermediate"},
		{"fresh", rootID, root.Cert, rootID, inter, t0, ""},
		{"just before half life", rootID, root.Cert, rootID, inter, half.Add(-time.Second), ""},
		{"at half life", rootID, root.Cert, rootID, inter, half, "past half its life"},
		{"the primary rotated", "aa:bb", other.Cert, rootID, inter, t0, "the primary's active root is aa:bb"},
		{"signed by another root", rootID, other.Cert, rootID, inter, t0, "not signed by the active root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := IntermediateReason(tt.primaryID, tt.primaryRoot, tt.localID, tt.intermediate, tt.now)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("IntermediateReason = %q, want %q", got, tt.want)
			}
		})
	}
}

func mustIntermediateCSR(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	p, err := NewIntermediateCSR(key, testTD, "dc2")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The roots a primary answers with are checked before anything is
// stored: an address whose roots were made in another datacenter, or that
// are not a CA's, is not the primary.
func TestCheckPrimaryRoots(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 0)
	id, _ := KeyID(root.Cert.PublicKey)
	rootPEM := string(EncodeCerts(root.Cert))
	mk := func(active bool, dc string) *pbca.CARoot {
		return &pbca.CARoot{Id: id, TrustDomain: testTD, RootCert: rootPEM, Active: active, Datacenter: dc}
	}
	if a, err := CheckPrimaryRoots([]*pbca.CARoot{mk(true, "dc1")}, "dc1"); err != nil || a.GetId() != id {
		t.Fatalf("CheckPrimaryRoots = %v, %v", a, err)
	}
	tests := []struct {
		name       string
		roots      []*pbca.CARoot
		notPrimary bool
		says       string
	}{
		{"none", nil, false, "no CA root yet"},
		{"none active", []*pbca.CARoot{mk(false, "dc1")}, false, "no active CA root"},
		{"made elsewhere", []*pbca.CARoot{mk(true, "dc3")}, true, `datacenter "dc3"`},
		{"two active", []*pbca.CARoot{mk(true, "dc1"), mk(true, "dc1")}, true, "two active roots"},
		{"not its key id", []*pbca.CARoot{{Id: "aa", TrustDomain: testTD, RootCert: rootPEM, Active: true, Datacenter: "dc1"}}, true, "not a CA certificate of that key id"},
		{"not PEM", []*pbca.CARoot{{Id: id, TrustDomain: testTD, RootCert: "x", Active: true, Datacenter: "dc1"}}, true, "root_cert"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CheckPrimaryRoots(tt.roots, "dc1")
			if err == nil || errors.Is(err, ErrNotPrimary) != tt.notPrimary || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("CheckPrimaryRoots = %v, want an error saying %q (not primary: %v)", err, tt.says, tt.notPrimary)
			}
		})
	}
}

// A datacenter's intermediate goes to that datacenter's servers alone: a
// server of dc2 gets dc2's, not dc3's, nor the primary's servers any; a
// plaintext port proves nothing and takes the caller at its word.
func TestCheckIntermediateCaller(t *testing.T) {
	tests := []struct {
		name, caller string
		plaintext    bool
		asked        string
		ok           bool
	}{
		{"a server of the datacenter", "dc2", false, "dc2", true},
		{"a server of another secondary", "dc2", false, "dc3", false},
		{"a server of the primary", "dc1", false, "dc2", false},
		{"a server asking for a new datacenter", "dc2", false, "evil", false},
		{"no datacenter proved", "", false, "dc2", false},
		{"plaintext", "", true, "dc2", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckIntermediateCaller(tt.caller, tt.plaintext, tt.asked)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckIntermediateCaller(%q, %v, %q) = %v, want ok %v", tt.caller, tt.plaintext, tt.asked, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrNotServerOfDatacenter) {
				t.Errorf("refusal %v does not wrap ErrNotServerOfDatacenter", err)
			}
		})
	}
}

// An intermediate signed for a secondary is name-constrained to the trust
// domain's URIs, and crypto/x509's verification holds it to that: a leaf
// under it naming another trust domain, or a URI of no host, does not
// verify; one of the trust domain does.
func TestIntermediateNameConstraints(t *testing.T) {
	root := testRoot(t, DefaultKeyType, 0)
	key := freshKey(t, DefaultKeyType)
	csrData, err := NewIntermediateCSR(key, testTD, "dc2")
	if err != nil {
		t.Fatal(err)
	}
	inter, err := SignIntermediate(mustCSR(t, csrData), root, DefaultIntermediateTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(inter.PermittedURIDomains, []string{testTD}) || len(inter.PermittedDNSDomains) != 0 {
		t.Fatalf("constraints: URI %q, DNS %q; want URI [%s] alone", inter.PermittedURIDomains, inter.PermittedDNSDomains, testTD)
	}
	critical := false
	for _, e := range inter.Extensions {
		if e.Id.Equal(asn1.ObjectIdentifier{2, 5, 29, 30}) {
			critical = e.Critical
		}
	}
	if !critical {
		t.Error("the name constraints extension is not critical")
	}
	tests := []struct {
		name, uri string
		ok        bool
	}{
		{"a service of the trust domain", "spiffe://" + testTD + "/ns/default/dc/dc2/svc/web", true},
		{"a server of the trust domain", "spiffe://" + testTD + "/server/dc/dc1/id/evil", true},
		{"another trust domain", "spiffe://other.trellis/ns/default/dc/dc2/svc/web", false},
		{"a parent of the trust domain", "spiffe://trellis/ns/default/dc/dc2/svc/web", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.uri)
			if err != nil {
				t.Fatal(err)
			}
			leafKey := freshKey(t, DefaultKeyType)
			der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
				SerialNumber: big.NewInt(7), NotBefore: t0.Add(-time.Minute), NotAfter: t0.Add(time.Hour),
				KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
				URIs: []*url.URL{u},
			}, inter, leafKey.Public(), key)
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			err = VerifyLeaf(EncodeCerts(leaf, inter), []*x509.Certificate{root.Cert}, t0)
			if tt.ok != (err == nil) {
				t.Fatalf("VerifyLeaf = %v, want ok %v", err, tt.ok)
			}
			var invalid x509.CertificateInvalidError
			if err != nil && !(errors.As(err, &invalid) && invalid.Reason == x509.CANotAuthorizedForThisName) {
				t.Errorf("refused for %v, want CANotAuthorizedForThisName", err)
			}
		})
	}
}
