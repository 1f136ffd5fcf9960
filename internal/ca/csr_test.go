package ca

import (
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func basicConstraintsExt(t *testing.T, isCA bool) pkix.Extension {
	t.Helper()
	type bc struct {
		IsCA bool `asn1:"optional"`
	}
	v, err := asn1.Marshal(bc{IsCA: isCA})
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: oidBasicConstraints, Critical: true, Value: v}
}

func TestCheckCSRRefuses(t *testing.T) {
	policy := CSRPolicy{TrustDomain: testTD, Datacenter: testDC}
	ec := testKey(t, DefaultKeyType)
	web := svcURI(testTD, testDC, "web")

	tampered := func() []byte {
		block, _ := pem.Decode(csrPEM(t, ec, []string{web}))
		der := append([]byte(nil), block.Bytes...)
		der[len(der)-1] ^= 0x01 // the last byte of the signature
		return pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: der})
	}

	cases := []struct {
		name   string
		pem    []byte
		reason string
		field  string
	}{
		{"not PEM", []byte("-----BEGIN nonsense"), ReasonNotPEM, "csr"},
		{"empty", nil, ReasonNotPEM, "csr"},
		{"too large", append(csrPEM(t, ec, []string{web}), make([]byte, maxCSRBytes)...), ReasonNotPEM, "csr"},
		{"a certificate block", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), ReasonNotCSR, "csr"},
		{"garbage in the block", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{0x30, 0x03, 1, 2, 3}}), ReasonNotCSR, "csr"},
		{"bad signature", tampered(), ReasonBadSignature, "csr"},
		{"two URI SANs", csrPEM(t, ec, []string{web, svcURI(testTD, testDC, "api")}), ReasonURISANCount, "csr.uri_san"},
		{"no URI SAN", csrPEM(t, ec, nil), ReasonURISANCount, "csr.uri_san"},
		{"not SPIFFE", csrPEM(t, ec, []string{"https://example.com/web"}), ReasonNotSPIFFE, "csr.uri_san"},
		{"SPIFFE of another shape", csrPEM(t, ec, []string{"spiffe://" + testTD + "/web"}), ReasonNotSPIFFE, "csr.uri_san"},
		{"trust domain only", csrPEM(t, ec, []string{"spiffe://" + testTD}), ReasonNotSPIFFE, "csr.uri_san"},
		{"foreign trust domain", csrPEM(t, ec, []string{svcURI("other.trellis", testDC, "web")}), ReasonTrustDomain, "csr.uri_san"},
		{"other datacenter", csrPEM(t, ec, []string{svcURI(testTD, "dc2", "web")}), ReasonDatacenter, "csr.uri_san"},
		{"agent of another datacenter", csrPEM(t, ec, []string{AgentID{testTD, "dc2", "i-1"}.String()}), ReasonDatacenter, "csr.uri_san"},
		// Only a server signs a server identity, for itself: asked for, it
		// is refused whatever its trust domain or datacenter.
		{"server identity", csrPEM(t, ec, []string{ServerID{testTD, testDC, "s-1"}.String()}), ReasonServerID, "csr.uri_san"},
		{"server identity of another datacenter", csrPEM(t, ec, []string{ServerID{testTD, "dc2", "s-1"}.String()}), ReasonServerID, "csr.uri_san"},
		{"server identity of another trust domain", csrPEM(t, ec, []string{ServerID{"other.trellis", testDC, "s-1"}.String()}), ReasonServerID, "csr.uri_san"},
		{"CA requested", csrPEM(t, ec, []string{web}, basicConstraintsExt(t, true)), ReasonCARequested, "csr.extensions"},
		{"unparseable basicConstraints", csrPEM(t, ec, []string{web}, pkix.Extension{Id: oidBasicConstraints, Value: []byte{0xff}}), ReasonCARequested, "csr.extensions"},
		{"RSA 1024", csrPEM(t, freshKey1024(t), []string{web}), ReasonKeyType, "csr.public_key"},
		{"P-521", csrPEM(t, p521Key(t), []string{web}), ReasonKeyType, "csr.public_key"},
		{"ed25519", csrPEM(t, ed25519Key(t), []string{web}), ReasonKeyType, "csr.public_key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			csr, err := ParseCSR(c.pem)
			var id Identity
			if err == nil {
				id, err = CheckCSR(csr, policy)
			}
			if err == nil {
				t.Fatalf("accepted as %v", id)
			}
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("error %T %v is not a *Refusal", err, err)
			}
			if r.Reason != c.reason || r.Field != c.field {
				t.Fatalf("refused with reason %q field %q (%v); want reason %q field %q", r.Reason, r.Field, r, c.reason, c.field)
			}
			if !strings.HasPrefix(r.Error(), c.field+": ") || r.Message == "" {
				t.Fatalf("message %q does not name the field", r.Error())
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("gRPC code %v, want InvalidArgument", status.Code(err))
			}
		})
	}
	if _, err := CheckCSR(nil, policy); err == nil {
		t.Fatal("CheckCSR(nil) accepted")
	}
}

func TestCheckCSRAccepts(t *testing.T) {
	policy := CSRPolicy{TrustDomain: testTD, Datacenter: testDC}
	svc := ServiceID{TrustDomain: testTD, Namespace: "shop", Datacenter: testDC, Service: "cart"}
	agent := AgentID{TrustDomain: testTD, Datacenter: testDC, Instance: "i-0123"}
	cases := []struct {
		name string
		kt   KeyType
		id   Identity
		exts []pkix.Extension
	}{
		{"service P-256", KeyType{"ec", 256}, svc, nil},
		{"service P-384", KeyType{"ec", 384}, svc, nil},
		{"service RSA 2048", KeyType{"rsa", 2048}, svc, nil},
		{"agent P-256", KeyType{"ec", 256}, agent, nil},
		{"agent RSA 2048", KeyType{"rsa", 2048}, agent, nil},
		// Asking for CA=false explicitly is harmless.
		{"CA=false requested", KeyType{"ec", 256}, svc, []pkix.Extension{basicConstraintsExt(t, false)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			csr := mustCSR(t, csrPEM(t, testKey(t, c.kt), []string{c.id.String()}, c.exts...))
			got, err := CheckCSR(csr, policy)
			if err != nil {
				t.Fatalf("CheckCSR: %v", err)
			}
			if got != c.id {
				t.Fatalf("identity %v, want %v", got, c.id)
			}
		})
	}
}

func TestParseCSRNewRequestHeader(t *testing.T) {
	block, _ := pem.Decode(csrPEM(t, testKey(t, DefaultKeyType), []string{svcURI(testTD, testDC, "web")}))
	block.Type = "NEW CERTIFICATE REQUEST" // what older openssl writes
	if _, err := ParseCSR(pem.EncodeToMemory(block)); err != nil {
		t.Fatalf("ParseCSR: %v", err)
	}
}
