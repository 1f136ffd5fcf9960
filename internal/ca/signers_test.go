package ca

import (
	"crypto/x509"
	"strings"
	"testing"

	pbca "trellis.dev/trellis/api/ca/v1"
)

// Which CAs sign a datacenter's leaves: in the primary its roots, active
// or not; in a secondary the intermediate the primary signed for it,
// never the primary's roots themselves.
func TestDatacenterSigners(t *testing.T) {
	oldRoot, newRoot := testRoot(t, DefaultKeyType, 0), testRoot(t, DefaultKeyType, 0)
	key := freshKey(t, DefaultKeyType)
	csr, err := NewIntermediateCSR(key, testTD, "dc2")
	if err != nil {
		t.Fatal(err)
	}
	inter, err := SignIntermediate(mustCSR(t, csr), newRoot, DefaultIntermediateTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	pem := func(c *x509.Certificate) string { return string(EncodeCerts(c)) }
	// As the primary stores them (rotation.go: signing_cert is the root).
	primaryOld := &pbca.CARoot{Id: "old", Datacenter: "dc1", RootCert: pem(oldRoot.Cert), SigningCert: pem(oldRoot.Cert)}
	primaryNew := &pbca.CARoot{Id: "new", Datacenter: "dc1", RootCert: pem(newRoot.Cert), SigningCert: pem(newRoot.Cert), Active: true}
	// As a secondary stores them: copies, the active one carrying its
	// intermediate.
	secondaryNew := &pbca.CARoot{Id: "new", Datacenter: "dc1", RootCert: pem(newRoot.Cert), SigningCert: pem(inter), Active: true}
	tests := []struct {
		name  string
		roots []*pbca.CARoot
		dc    string
		want  []*x509.Certificate
		err   string
	}{
		{"the primary, through a rotation", []*pbca.CARoot{primaryOld, primaryNew}, "dc1", []*x509.Certificate{oldRoot.Cert, newRoot.Cert}, ""},
		{"a secondary", []*pbca.CARoot{primaryOld, secondaryNew}, "dc2", []*x509.Certificate{inter}, ""},
		{"a secondary before its intermediate", []*pbca.CARoot{primaryOld, primaryNew}, "dc2", nil, ""},
		{"the primary seen from a secondary's store", []*pbca.CARoot{secondaryNew}, "dc1", []*x509.Certificate{newRoot.Cert, inter}, ""},
		{"no roots", nil, "dc1", nil, ""},
		{"a root that does not parse", []*pbca.CARoot{{Id: "bad", Datacenter: "dc1", RootCert: "nope"}, primaryNew}, "dc1", []*x509.Certificate{newRoot.Cert}, "root bad: root_cert"},
		{"a signing certificate that does not parse", []*pbca.CARoot{{Id: "bad", Datacenter: "dc1", RootCert: pem(newRoot.Cert), SigningCert: "nope"}}, "dc2", nil, "root bad: signing_cert"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DatacenterSigners(tt.roots, tt.dc)
			if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("err = %v, want one saying %q", err, tt.err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d signers, want %d", len(got), len(tt.want))
			}
			for i := range got {
				if !got[i].Equal(tt.want[i]) {
					t.Errorf("signer %d is %q, want %q", i, got[i].Subject.CommonName, tt.want[i].Subject.CommonName)
				}
			}
		})
	}
}
