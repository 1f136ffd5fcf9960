package ca

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"
)

var serverID = ServerID{TrustDomain: testTD, Datacenter: testDC, Server: "0b7c3f4e-1d2a-4c5b-9e8f-7a6b5c4d3e2f"}

var serverNames = []string{"server.dc1.trellis", "server.dc1.connect.trellis"}

// A server's leaf names its SPIFFE id and the DNS names peers check a
// server by, serves and dials, and verifies against the roots as every
// leaf does: directly, after a rotation through the cross-signed root,
// and in a secondary through its intermediate.
func TestSignServerLeaf(t *testing.T) {
	a := testRoot(t, DefaultKeyType, 0)
	key := freshKey(t, DefaultKeyType)
	leaf, err := SignServerLeaf(key.Public(), serverID, serverNames, a, DefaultLeafTTL, t0)
	if err != nil {
		t.Fatalf("SignServerLeaf: %v", err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != serverID.String() {
		t.Errorf("URIs %v, want %s", leaf.URIs, serverID)
	}
	if !slices.Equal(leaf.DNSNames, serverNames) {
		t.Errorf("DNS names %v, want %v", leaf.DNSNames, serverNames)
	}
	if leaf.IsCA || !leaf.BasicConstraintsValid {
		t.Error("a server leaf is a CA")
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("ext key usage %v", leaf.ExtKeyUsage)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
		t.Errorf("key usage %v", leaf.KeyUsage)
	}
	if !leaf.NotBefore.Equal(t0.Add(-time.Minute)) || !leaf.NotAfter.Equal(t0.Add(DefaultLeafTTL)) {
		t.Errorf("validity %v - %v", leaf.NotBefore, leaf.NotAfter)
	}
	pemChain := EncodeCerts(leaf)
	mustVerify(t, "server leaf, pool {A}", pemChain, t0, a.Cert)
	id, err := VerifyPeer([]*x509.Certificate{leaf}, []*x509.Certificate{a.Cert}, t0)
	if err != nil || id != serverID {
		t.Errorf("VerifyPeer = %v, %v; want %v", id, err, serverID)
	}

	// After a rotation to B, a server leaf of B carries B cross-signed by
	// A and verifies against either root alone.
	later := t0.Add(time.Hour)
	bCert, bKey, err := NewRoot(RootOptions{TrustDomain: testTD, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	cross, err := CrossSign(bCert, a, later)
	if err != nil {
		t.Fatal(err)
	}
	b := Signer{Cert: bCert, Key: bKey, Chain: []*x509.Certificate{cross}}
	leafB, err := SignServerLeaf(key.Public(), serverID, serverNames, b, DefaultLeafTTL, later)
	if err != nil {
		t.Fatal(err)
	}
	chainB := EncodeCerts(append([]*x509.Certificate{leafB}, b.Chain...)...)
	mustVerify(t, "server leaf of B, pool {A}", chainB, later, a.Cert)
	mustVerify(t, "server leaf of B, pool {B}", chainB, later, bCert)

	// A secondary's server signs under its intermediate.
	secKey := freshKey(t, DefaultKeyType)
	inter, err := SignIntermediate(mustCSR(t, csrPEM(t, secKey, []string{"spiffe://" + testTD})), a, DefaultIntermediateTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	sec := Signer{Cert: inter, Key: secKey, Chain: []*x509.Certificate{inter}}
	dc2 := ServerID{TrustDomain: testTD, Datacenter: "dc2", Server: "s-1"}
	leaf2, err := SignServerLeaf(key.Public(), dc2, []string{"server.dc2.trellis"}, sec, DefaultLeafTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	mustVerify(t, "secondary server leaf, pool {A}", EncodeCerts(leaf2, inter), t0, a.Cert)

	// Never beyond the signer.
	short := testRoot(t, DefaultKeyType, time.Hour)
	capped, err := SignServerLeaf(key.Public(), serverID, serverNames, short, DefaultLeafTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !capped.NotAfter.Equal(short.Cert.NotAfter) {
		t.Errorf("not after %v, beyond the signer's %v", capped.NotAfter, short.Cert.NotAfter)
	}
}

func TestSignServerLeafRefuses(t *testing.T) {
	a := testRoot(t, DefaultKeyType, 24*time.Hour)
	pub := testKey(t, DefaultKeyType).Public()
	cases := []struct {
		name  string
		pub   any
		id    ServerID
		names []string
		s     Signer
		ttl   time.Duration
		now   time.Time
		says  string
	}{
		{"no key", nil, serverID, serverNames, a, time.Hour, t0, "key: none"},
		{"RSA 1024", freshKey1024(t).Public(), serverID, serverNames, a, time.Hour, t0, "key: an RSA key of 1024 bits"},
		{"empty server", nil, ServerID{TrustDomain: testTD, Datacenter: testDC}, serverNames, a, time.Hour, t0, "server is empty"},
		{"upper-case server", nil, ServerID{TrustDomain: testTD, Datacenter: testDC, Server: "S1"}, serverNames, a, time.Hour, t0, "server \"S1\""},
		{"bad trust domain", nil, ServerID{TrustDomain: "TD", Datacenter: testDC, Server: "s1"}, serverNames, a, time.Hour, t0, "trust domain"},
		{"no names", nil, serverID, nil, a, time.Hour, t0, "dns names: none"},
		{"bad name", nil, serverID, []string{"server..trellis"}, a, time.Hour, t0, "dns names"},
		{"zero ttl", nil, serverID, serverNames, a, 0, t0, "ttl"},
		{"expired signer", nil, serverID, serverNames, a, time.Hour, t0.Add(25 * time.Hour), "expired"},
		{"no signer", nil, serverID, serverNames, Signer{}, time.Hour, t0, "signer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := c.pub
			if key == nil && c.name != "no key" {
				key = pub
			}
			leaf, err := SignServerLeaf(key, c.id, c.names, c.s, c.ttl, c.now)
			if err == nil {
				t.Fatalf("signed %v", leaf.URIs)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Fatalf("error %q does not say %q", err, c.says)
			}
		})
	}
}
