package tlsutil

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/ca"
)

// connectLeaf signs a leaf of id under a new Connect CA root of trust
// domain td and returns it (as a client presents it) with the root.
func connectLeaf(t *testing.T, td, id string) (tls.Certificate, *x509.Certificate) {
	t.Helper()
	root, rootKey, err := ca.NewRoot(ca.RootOptions{TrustDomain: td, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := connectLeafUnder(t, ca.Signer{Cert: root, Key: rootKey}, id)
	return *cert, root
}

// connectLeafUnder signs a leaf of id (a service's or an agent's) with
// signer, as the signing service does, and returns it with its chain.
func connectLeafUnder(t *testing.T, signer ca.Signer, id string) (*tls.Certificate, *x509.Certificate) {
	t.Helper()
	now := time.Now()
	key, err := ca.GenerateKey(ca.KeyType{Algorithm: ca.AlgorithmEC, Bits: 256})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(id)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{u}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := ca.ParseIDString(id)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.SignLeaf(csr, parsed, signer, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return chainCert(leaf, key, signer.Chain), leaf
}

// The public port asks for a client certificate and requires none; one
// presented must be a client certificate of the cluster CA or an agent
// leaf of the Connect CA whose roots the server was given.
func TestPublicPortClientCertificates(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	caOnly := p.configurator(Config{CAFile: p.write("agent-ca.pem", p.ca.CertPEM)})
	const td = "11111111-2222-3333-4444-555555555555.trellis"
	agentLeaf, root := connectLeaf(t, td, "spiffe://"+td+"/agent/client/dc/dc1/id/i-1")
	serviceLeaf, serviceRoot := connectLeaf(t, td, "spiffe://"+td+"/ns/default/dc/dc1/svc/web")
	otherDC, otherDCRoot := connectLeaf(t, td, "spiffe://"+td+"/agent/client/dc/dc2/id/i-1")
	presenting := func(cert tls.Certificate) *tls.Config {
		return caOnly.OutgoingClientConfigWith(func() *tls.Certificate { return &cert })
	}

	tests := []struct {
		name    string
		roots   []*x509.Certificate
		client  *tls.Config
		refusal string // "" when accepted
	}{
		{"no certificate", nil, caOnly.OutgoingClientConfig(), ""},
		{"an agent leaf before the server knows the Connect CA's roots", nil, presenting(agentLeaf), "does not know the Connect CA's roots"},
		{"an agent leaf of the Connect CA", []*x509.Certificate{root}, presenting(agentLeaf), ""},
		{"an agent leaf of another Connect CA", []*x509.Certificate{serviceRoot}, presenting(agentLeaf), "not a leaf of the Connect CA"},
		{"a service's leaf", []*x509.Certificate{serviceRoot}, presenting(serviceLeaf), "not the SPIFFE id of an agent"},
		{"an agent leaf of another datacenter", []*x509.Certificate{otherDCRoot}, presenting(otherDC), "not the SPIFFE id of an agent of datacenter dc1"},
		{"a certificate of another CA", nil, rawClient(p.cert(p.other, KindClient, "dc1")), "not signed by the cluster CA"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv.SetConnectRoots(td, tc.roots, tc.roots)
			_, serverErr, clientErr := handshake(t, mustConfig(srv.IncomingPublicConfig()), tc.client)
			if tc.refusal == "" {
				if serverErr != nil || clientErr != nil {
					t.Fatalf("refused: server %v, client %v", serverErr, clientErr)
				}
				return
			}
			if serverErr == nil || !strings.Contains(serverErr.Error(), tc.refusal) {
				t.Fatalf("server error %v, want one saying %q", serverErr, tc.refusal)
			}
		})
	}

	// A client certificate of the cluster CA is accepted, as before.
	kp := p.cert(p.ca, KindClient, "dc1")
	client := p.configurator(Config{CAFile: p.write("c-ca.pem", p.ca.CertPEM), CertFile: p.write("c.pem", kp.CertPEM), KeyFile: p.write("c-key.pem", kp.KeyPEM)})
	if _, serverErr, clientErr := handshake(t, mustConfig(srv.IncomingPublicConfig()), client.OutgoingClientConfig()); serverErr != nil || clientErr != nil {
		t.Fatalf("a client certificate of the cluster CA: server %v, client %v", serverErr, clientErr)
	}
}
