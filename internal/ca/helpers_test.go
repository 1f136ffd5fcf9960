package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net/url"
	"sync"
	"testing"
)

// keyCache holds one key per type for the whole test binary: RSA 4096
// generation takes seconds, and the tests judge certificates, not keys.
var keyCache sync.Map

func testKey(t testing.TB, kt KeyType) crypto.Signer {
	t.Helper()
	if k, ok := keyCache.Load(kt); ok {
		return k.(crypto.Signer)
	}
	k, err := GenerateKey(kt)
	if err != nil {
		t.Fatalf("GenerateKey(%v): %v", kt, err)
	}
	keyCache.Store(kt, k)
	return k
}

// freshKey is a key no other test shares, for tests that need two keys
// of one type.
func freshKey(t testing.TB, kt KeyType) crypto.Signer {
	t.Helper()
	k, err := GenerateKey(kt)
	if err != nil {
		t.Fatalf("GenerateKey(%v): %v", kt, err)
	}
	return k
}

// csrPEM makes a PEM CSR for key with the given URI SANs and extra
// requested extensions.
func csrPEM(t testing.TB, key crypto.Signer, uris []string, exts ...pkix.Extension) []byte {
	t.Helper()
	tmpl := &x509.CertificateRequest{ExtraExtensions: exts}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", s, err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatalf("CreateCertificateRequest: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// mustCSR parses a CSR the test made.
func mustCSR(t testing.TB, pemData []byte) *x509.CertificateRequest {
	t.Helper()
	csr, err := ParseCSR(pemData)
	if err != nil {
		t.Fatalf("ParseCSR: %v", err)
	}
	return csr
}

func svcURI(td, dc, svc string) string {
	return ServiceID{TrustDomain: td, Namespace: "default", Datacenter: dc, Service: svc}.String()
}

// freshKey1024 is an RSA key too small for the CA: clients may still
// send one.
func freshKey1024(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatalf("rsa.GenerateKey(1024): %v", err)
	}
	return k
}

func p521Key(t testing.TB) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ed25519Key(t testing.TB) crypto.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
