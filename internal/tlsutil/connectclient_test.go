package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
)

// source is a ConnectSource of fixed values; its signers are its roots
// unless set.
type source struct {
	leaf    *tls.Certificate
	td      string
	roots   []*x509.Certificate
	signers []*x509.Certificate
}

func (s source) ConnectSigners() []*x509.Certificate {
	if s.signers != nil {
		return s.signers
	}
	return s.roots
}

func (s source) ConnectCertificate() *tls.Certificate { return s.leaf }

func (s source) ConnectRoots() (string, *x509.CertPool) {
	if len(s.roots) == 0 {
		return "", nil
	}
	p := x509.NewCertPool()
	for _, r := range s.roots {
		p.AddCert(r)
	}
	return s.td, p
}

// The public port serves the server's Connect leaf to a client that asks
// for ConnectServerName, and its certificate file to any other name or
// none: what the CLI, curl and a first-join agent ask for.
func TestPublicPortChoosesTheCertificateByName(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	root := newConnectCA(t, testTD)
	public := mustConfig(srv.IncomingPublicConfig())
	served := func(name string) *x509.Certificate {
		t.Helper()
		state, serverErr, clientErr := handshake(t, public, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true, ServerName: name})
		if serverErr != nil || clientErr != nil {
			t.Fatalf("asking for %q: server %v, client %v", name, serverErr, clientErr)
		}
		return state.PeerCertificates[0]
	}
	if c := served("server.dc1.connect.trellis"); len(c.URIs) != 0 {
		t.Fatalf("a server without a Connect leaf served %v", c.URIs)
	}
	leaf := root.serverLeaf(t, testTD, "dc1", "s-1")
	srv.SetConnectRoots(testTD, []*x509.Certificate{root.signer.Cert}, []*x509.Certificate{root.signer.Cert})
	srv.SetConnectServerCertificate(leaf)
	if c := served("server.dc1.connect.trellis"); !c.Equal(leaf.Leaf) {
		t.Fatalf("asked for the Connect name, served %q %v", c.Subject.CommonName, c.URIs)
	}
	for _, name := range []string{"server.dc1.trellis", "localhost", ""} {
		if c := served(name); !c.Equal(srv.Certificate()) {
			t.Errorf("asked for %q, served %q %v, want the certificate file", name, c.Subject.CommonName, c.URIs)
		}
	}
	// The CLI's own config, with the cluster CA alone, still works.
	cli := p.configurator(Config{CAFile: p.write("cli-ca.pem", p.ca.CertPEM)})
	if _, serverErr, clientErr := handshake(t, public, cli.OutgoingClientConfig()); serverErr != nil || clientErr != nil {
		t.Fatalf("the CLI: server %v, client %v", serverErr, clientErr)
	}
}

// An agent's dial: with the cluster CA alone until it holds a leaf and
// the roots; then asking for the server's Connect leaf, presenting its
// own, and accepting a Connect server leaf of its datacenter signed by
// its datacenter's CA or, from a server without one yet, the certificate
// file; never another leaf.
func TestConnectClientConfig(t *testing.T) {
	p := newPKI(t)
	root, other := newConnectCA(t, testTD), newConnectCA(t, testTD)
	inter := root.intermediate(t)
	agentLeaf, _ := connectLeafUnder(t, root.signer, "spiffe://"+testTD+"/agent/client/dc/dc1/id/i-1")
	base := p.configurator(Config{CAFile: p.write("agent-ca.pem", p.ca.CertPEM)}).OutgoingClientConfig()
	ready := source{leaf: agentLeaf, td: testTD, roots: []*x509.Certificate{root.signer.Cert}}
	file := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{tlsCert(p.cert(p.ca, KindServer, "dc1"))}, ClientAuth: tls.RequestClientCert}
	serving := func(c *tls.Certificate) *tls.Config {
		return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*c}, ClientAuth: tls.RequestClientCert}
	}
	tests := []struct {
		name    string
		src     source
		server  *tls.Config
		sni     string
		refusal string
	}{
		{"no leaf yet: the cluster CA's check", source{}, file, "server.dc1.trellis", ""},
		{"no leaf yet: a Connect leaf is not checked", source{td: testTD, roots: ready.roots}, serving(root.serverLeaf(t, testTD, "dc1", "s-1")), "server.dc1.trellis", "not signed by the cluster CA"},
		{"ready: a Connect server leaf", ready, serving(root.serverLeaf(t, testTD, "dc1", "s-1")), "server.dc1.connect.trellis", ""},
		{"ready: a server without a leaf yet", ready, file, "server.dc1.connect.trellis", ""},
		{"ready: an agent's leaf", ready, serving(agentLeaf), "server.dc1.connect.trellis", "not the SPIFFE id of a server"},
		{"ready: a server leaf of another datacenter", ready, serving(root.serverLeaf(t, testTD, "dc2", "s-1")), "server.dc1.connect.trellis", "of datacenter dc1"},
		{"ready: a server leaf of another root", ready, serving(other.serverLeaf(t, testTD, "dc1", "s-1")), "server.dc1.connect.trellis", "not a leaf of the Connect CA"},
		{"ready: a server leaf under another datacenter's intermediate", ready, serving(inter.serverLeaf(t, testTD, "dc1", "evil")), "server.dc1.connect.trellis", "not signed by a CA of datacenter dc1"},
		{"ready in a secondary: a server leaf under its intermediate", source{leaf: agentLeaf, td: testTD, roots: ready.roots, signers: []*x509.Certificate{inter.signer.Cert}},
			serving(inter.serverLeaf(t, testTD, "dc1", "s-1")), "server.dc1.connect.trellis", ""},
		{"ready in a secondary: a server leaf the root signed", source{leaf: agentLeaf, td: testTD, roots: ready.roots, signers: []*x509.Certificate{inter.signer.Cert}},
			serving(root.serverLeaf(t, testTD, "dc1", "s-1")), "server.dc1.connect.trellis", "not signed by a CA of datacenter dc1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sni string
			var presented bool
			server := tc.server.Clone()
			server.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				sni = hello.ServerName
				return nil, nil
			}
			server.VerifyConnection = func(cs tls.ConnectionState) error {
				presented = len(cs.PeerCertificates) > 0
				return nil
			}
			_, _, clientErr := handshake(t, server, ConnectClientConfig(base, "dc1", "", tc.src))
			if sni != tc.sni {
				t.Errorf("asked for %q, want %q", sni, tc.sni)
			}
			if tc.refusal == "" {
				if clientErr != nil {
					t.Fatalf("refused: %v", clientErr)
				}
				if presented != (tc.src.leaf != nil) {
					t.Fatalf("presented a certificate: %v; the source has a leaf: %v", presented, tc.src.leaf != nil)
				}
				return
			}
			if clientErr == nil || !strings.Contains(clientErr.Error(), tc.refusal) {
				t.Fatalf("client error %v, want one saying %q", clientErr, tc.refusal)
			}
		})
	}
}
