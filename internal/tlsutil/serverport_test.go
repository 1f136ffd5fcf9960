package tlsutil

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/ca"
)

const testTD = "11111111-2222-3333-4444-555555555555.trellis"

// connectCA is a root of the Connect CA, as a signer of server leaves.
type connectCA struct {
	td     string
	signer ca.Signer
}

func newConnectCA(t *testing.T, td string) connectCA {
	t.Helper()
	cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: td, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return connectCA{td: td, signer: ca.Signer{Cert: cert, Key: key}}
}

// rotated is the root after r, cross-signed by r: leaves it signs carry
// the cross-signed certificate.
func (r connectCA) rotated(t *testing.T) connectCA {
	t.Helper()
	next := newConnectCA(t, r.td)
	cross, err := ca.CrossSign(next.signer.Cert, r.signer, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	next.signer.Chain = []*x509.Certificate{cross}
	return next
}

// serverLeaf signs the Connect leaf of server name in datacenter dc, as
// a server's CA module hands it over.
func (r connectCA) serverLeaf(t *testing.T, td, dc, name string) *tls.Certificate {
	t.Helper()
	key, err := ca.GenerateKey(ca.DefaultKeyType)
	if err != nil {
		t.Fatal(err)
	}
	id := ca.ServerID{TrustDomain: td, Datacenter: dc, Server: name}
	leaf, err := ca.SignServerLeaf(key.Public(), id, []string{ServerName(dc, DefaultDomain), ConnectServerName(dc, DefaultDomain)}, r.signer, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return chainCert(leaf, key, r.signer.Chain)
}

// intermediate is an intermediate CA under r, as the primary signs one
// for a secondary datacenter, as a signer of leaves (which carry it).
func (r connectCA) intermediate(t *testing.T) connectCA {
	t.Helper()
	key, err := ca.GenerateKey(ca.DefaultKeyType)
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, err := ca.NewIntermediateCSR(key, r.td, "dc2")
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ca.ParseCSR(csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	inter, err := ca.SignIntermediate(csr, r.signer, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return connectCA{td: r.td, signer: ca.Signer{Cert: inter, Key: key, Chain: []*x509.Certificate{inter}}}
}

// leafOf signs a service or agent leaf of id, as the signing service
// does.
func (r connectCA) leafOf(t *testing.T, id string) *tls.Certificate {
	t.Helper()
	cert, _ := connectLeafUnder(t, r.signer, id)
	return cert
}

func chainCert(leaf *x509.Certificate, key crypto.Signer, chain []*x509.Certificate) *tls.Certificate {
	c := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	for _, ic := range chain {
		c.Certificate = append(c.Certificate, ic.Raw)
	}
	return c
}

// presenting presents cert whatever the server asks, and verifies
// nothing.
func presenting(cert *tls.Certificate) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }}
}

// The server ports take a server certificate of the cluster CA, or a
// Connect server leaf of this trust domain and datacenter signed by a CA
// of this datacenter (the primary's roots; a secondary's own
// intermediate); never a leaf under another datacenter's intermediate,
// an agent's or a service's leaf.
func TestServerPortAcceptsConnectServerLeaves(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	root, other := newConnectCA(t, testTD), newConnectCA(t, testTD)
	inter, otherInter := root.intermediate(t), root.intermediate(t)
	port, err := srv.ServerPort()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		roots   []*x509.Certificate
		signers []*x509.Certificate // the roots when nil
		client  *tls.Config
		refusal string // "" when accepted
	}{
		{"a server leaf under another datacenter's intermediate", []*x509.Certificate{root.signer.Cert}, nil, presenting(inter.serverLeaf(t, testTD, "dc1", "evil")), "not signed by a CA of datacenter dc1"},
		{"a secondary's server leaf under its own intermediate", []*x509.Certificate{root.signer.Cert}, []*x509.Certificate{inter.signer.Cert}, presenting(inter.serverLeaf(t, testTD, "dc1", "s-2")), ""},
		{"in a secondary, a leaf under another secondary's intermediate", []*x509.Certificate{root.signer.Cert}, []*x509.Certificate{inter.signer.Cert}, presenting(otherInter.serverLeaf(t, testTD, "dc1", "evil")), "not signed by a CA of datacenter dc1"},
		{"in a secondary, a leaf the root signed", []*x509.Certificate{root.signer.Cert}, []*x509.Certificate{inter.signer.Cert}, presenting(root.serverLeaf(t, testTD, "dc1", "s-2")), "not signed by a CA of datacenter dc1"},
		{"no signers known", []*x509.Certificate{root.signer.Cert}, []*x509.Certificate{}, presenting(root.serverLeaf(t, testTD, "dc1", "s-2")), "not signed by a CA of datacenter dc1"},
		{"a Connect server leaf", []*x509.Certificate{root.signer.Cert}, nil, presenting(root.serverLeaf(t, testTD, "dc1", "s-2")), ""},
		{"a server certificate of the cluster CA", []*x509.Certificate{root.signer.Cert}, nil, rawClient(p.cert(p.ca, KindServer, "dc1")), ""},
		{"a Connect server leaf before the server knows the roots", nil, nil, presenting(root.serverLeaf(t, testTD, "dc1", "s-2")), "does not know the Connect CA's roots"},
		{"a Connect server leaf of another root", []*x509.Certificate{root.signer.Cert}, nil, presenting(other.serverLeaf(t, testTD, "dc1", "s-2")), "not a leaf of the Connect CA"},
		{"a Connect server leaf of another datacenter", []*x509.Certificate{root.signer.Cert}, nil, presenting(root.serverLeaf(t, testTD, "dc2", "s-2")), "not the SPIFFE id of a server of datacenter dc1"},
		{"a Connect server leaf of another trust domain", []*x509.Certificate{root.signer.Cert}, nil, presenting(root.serverLeaf(t, "other.trellis", "dc1", "s-2")), "not of the Connect CA's trust domain"},
		{"an agent leaf", []*x509.Certificate{root.signer.Cert}, nil, presenting(root.leafOf(t, "spiffe://"+testTD+"/agent/client/dc/dc1/id/i-1")), "not the SPIFFE id of a server"},
		{"a service leaf", []*x509.Certificate{root.signer.Cert}, nil, presenting(root.leafOf(t, "spiffe://"+testTD+"/ns/default/dc/dc1/svc/web")), "not the SPIFFE id of a server"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			signers := tc.signers
			if signers == nil {
				signers = tc.roots
			}
			srv.SetConnectRoots(testTD, tc.roots, signers)
			_, serverErr, clientErr := handshake(t, port.Incoming(), tc.client)
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

	// A dialing server takes the same from the server it dials.
	srv.SetConnectRoots(testTD, []*x509.Certificate{root.signer.Cert}, []*x509.Certificate{root.signer.Cert})
	for _, tc := range []struct {
		name    string
		serves  *tls.Certificate
		refusal string
	}{
		{"a Connect server leaf", root.serverLeaf(t, testTD, "dc1", "s-2"), ""},
		{"an agent leaf", root.leafOf(t, "spiffe://"+testTD+"/agent/client/dc/dc1/id/i-1"), "not the SPIFFE id of a server"},
		{"a Connect server leaf of another root", other.serverLeaf(t, testTD, "dc1", "s-2"), "not a leaf of the Connect CA"},
		{"a server leaf under an intermediate", inter.serverLeaf(t, testTD, "dc1", "evil"), "not signed by a CA of datacenter dc1"},
	} {
		t.Run("dialing/"+tc.name, func(t *testing.T) {
			_, _, clientErr := handshake(t, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*tc.serves}}, port.Outgoing(nil))
			if tc.refusal == "" && clientErr != nil {
				t.Fatalf("refused: %v", clientErr)
			}
			if tc.refusal != "" && (clientErr == nil || !strings.Contains(clientErr.Error(), tc.refusal)) {
				t.Fatalf("client error %v, want one saying %q", clientErr, tc.refusal)
			}
		})
	}
}

// linkKinds connects server b to server a's server port over tracked
// links and returns, from each side's links, the certificate its peer
// presented: what a saw of b, and what b saw of a.
func linkKinds(t *testing.T, a, b *Configurator) (aSaw, bSaw string) {
	t.Helper()
	ap, err := a.ServerPort()
	if err != nil {
		t.Fatal(err)
	}
	bp, err := b.ServerPort()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = ap.Listener(ln)
	defer ln.Close()
	deadline := time.Now().Add(30 * time.Second) // a guard against a hung test
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		conn.SetDeadline(deadline)
		s := tls.Server(conn, ap.Incoming())
		err = s.Handshake()
		if err == nil {
			_, err = s.Write([]byte{1})
		}
		if err == nil {
			aSaw = only(t, ap.Links())
			_, err = s.Read(make([]byte, 1))
		}
		done <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	raw = bp.Track(raw)
	defer raw.Close()
	raw.SetDeadline(deadline)
	c := tls.Client(raw, bp.Outgoing(raw))
	if err := c.Handshake(); err != nil {
		t.Fatalf("dialing: %v", err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("dialing: %v", err)
	}
	bSaw = only(t, bp.Links())
	c.Write([]byte{1})
	if err := <-done; err != nil {
		t.Fatalf("dialed: %v", err)
	}
	c.Close()
	return aSaw, bSaw
}

// only is the kind of the one link of counts.
func only(t *testing.T, counts map[string]int) string {
	t.Helper()
	for kind, n := range counts {
		if n == 1 && len(counts) == 1 {
			return kind
		}
	}
	t.Errorf("links %v, want one", counts)
	return ""
}

// Which certificates two servers show each other: a Connect leaf only to
// a peer that asked for it and can verify it, the certificate file
// otherwise, so that a server without state (just joined, no roots) and a
// server with a Connect leaf always connect.
func TestServerPortNegotiation(t *testing.T) {
	p := newPKI(t)
	root := newConnectCA(t, testTD)
	next := root.rotated(t)
	roots := []*x509.Certificate{root.signer.Cert}
	type side struct {
		roots []*x509.Certificate
		leaf  *tls.Certificate
	}
	tests := []struct {
		name         string
		a, b         side // a is dialed, b dials
		aSaw, bSaw   string
		aDialedAgain bool
	}{
		{"no Connect CA yet", side{}, side{}, PeerClusterCA, PeerClusterCA, false},
		{"both ready", side{roots, root.serverLeaf(t, testTD, "dc1", "a")}, side{roots, root.serverLeaf(t, testTD, "dc1", "b")}, PeerConnect, PeerConnect, false},
		{"the dialed server has no state yet", side{}, side{roots, root.serverLeaf(t, testTD, "dc1", "b")}, PeerClusterCA, PeerClusterCA, false},
		{"the dialing server has no state yet", side{roots, root.serverLeaf(t, testTD, "dc1", "a")}, side{}, PeerClusterCA, PeerClusterCA, false},
		{"the dialing server knows the roots, has no leaf yet", side{roots, root.serverLeaf(t, testTD, "dc1", "a")}, side{roots, nil}, PeerClusterCA, PeerConnect, false},
		{"the dialed server knows the roots, has no leaf yet", side{roots, nil}, side{roots, root.serverLeaf(t, testTD, "dc1", "b")}, PeerConnect, PeerClusterCA, false},
		// After a rotation, a server that has not seen the new root yet
		// takes no leaf of it (the new root is not yet a CA of its
		// datacenter, cross-signed or not): it names the CAs it takes, and
		// the dialing server shows it its file instead.
		{"the dialing server signed under a root the other has not seen", side{roots, root.serverLeaf(t, testTD, "dc1", "a")},
			side{[]*x509.Certificate{root.signer.Cert, next.signer.Cert}, next.serverLeaf(t, testTD, "dc1", "b")}, PeerClusterCA, PeerConnect, false},
		{"both have seen the rotation, one leaf of each root", side{[]*x509.Certificate{root.signer.Cert, next.signer.Cert}, root.serverLeaf(t, testTD, "dc1", "a")},
			side{[]*x509.Certificate{root.signer.Cert, next.signer.Cert}, next.serverLeaf(t, testTD, "dc1", "b")}, PeerConnect, PeerConnect, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
			b := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
			for _, s := range []struct {
				c *Configurator
				side
			}{{a, tc.a}, {b, tc.b}} {
				s.c.SetConnectRoots(testTD, s.roots, s.roots)
				s.c.SetConnectServerCertificate(s.leaf)
			}
			aSaw, bSaw := linkKinds(t, a, b)
			if aSaw != tc.aSaw || bSaw != tc.bSaw {
				t.Fatalf("the dialed server saw %s, the dialing one %s; want %s and %s", aSaw, bSaw, tc.aSaw, tc.bSaw)
			}
		})
	}
}

// When a server becomes ready to speak Connect (a valid leaf and the
// roots), it closes its Raft links, opened with its certificate file, so
// that they are opened again with the leaf; it does so once, not at every
// renewal, and leaves the server RPCs' links to the gRPC server.
func TestConnectReadyClosesTheLinks(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	port, _ := srv.ServerPort()
	root := newConnectCA(t, testTD)
	var calls []int
	srv.OnConnectReady(func(closed int) { calls = append(calls, closed) })

	a, b := net.Pipe()
	defer b.Close()
	link := port.Track(a)
	if got := port.Links(); got[LinkHandshaking] != 1 {
		t.Fatalf("links %v, want one handshaking", got)
	}
	// A link of the server RPCs, which the gRPC server ends at its age:
	// never closed here.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tracked := port.Listener(ln)
	go net.Dial("tcp", ln.Addr().String())
	rpcLink, err := tracked.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer rpcLink.Close()
	srv.SetConnectRoots(testTD, []*x509.Certificate{root.signer.Cert}, []*x509.Certificate{root.signer.Cert})
	if len(calls) != 0 || port.Links()[LinkHandshaking] != 2 {
		t.Fatal("the links were closed with the roots alone")
	}
	srv.SetConnectServerCertificate(root.serverLeaf(t, testTD, "dc1", "s-1"))
	if len(calls) != 1 || calls[0] != 1 || port.Links()[LinkHandshaking] != 1 {
		t.Fatalf("ready: calls %v, links %v; want one call closing the Raft link alone", calls, port.Links())
	}
	if _, err := link.Write([]byte{1}); err == nil {
		t.Fatal("the link is still open")
	}
	// A renewal, or the roots again, changes nothing.
	port.Track(b)
	srv.SetConnectServerCertificate(root.serverLeaf(t, testTD, "dc1", "s-1"))
	srv.SetConnectRoots(testTD, []*x509.Certificate{root.signer.Cert}, []*x509.Certificate{root.signer.Cert})
	if len(calls) != 1 || port.Links()[LinkHandshaking] != 2 {
		t.Fatalf("after a renewal: calls %v, links %v", calls, port.Links())
	}
	// Losing the leaf and getting one again is becoming ready again.
	srv.SetConnectServerCertificate(nil)
	srv.SetConnectServerCertificate(root.serverLeaf(t, testTD, "dc1", "s-1"))
	if len(calls) != 2 || calls[1] != 1 {
		t.Fatalf("calls %v, want a second one", calls)
	}
}

// The datacenter other than this one whose server name a certificate
// holds: exactly server.<dc>.<domain>, one datacenter only.
func TestOtherServerDatacenter(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		want  string
		err   bool
	}{
		{"another datacenter's server", []string{"server.dc2.trellis", "localhost"}, "dc2", false},
		{"this datacenter's", []string{"server.dc1.trellis"}, "", false},
		{"a client", []string{"client.dc2.trellis"}, "", false},
		{"another domain", []string{"server.dc2.consul"}, "", false},
		{"a wildcard", []string{"*.dc2.trellis"}, "", false},
		{"a longer name", []string{"server.a.dc2.trellis"}, "", false},
		{"not a label", []string{"server.DC2.trellis"}, "", false},
		{"the same twice", []string{"server.dc2.trellis", "server.dc2.trellis"}, "dc2", false},
		{"this and another", []string{"server.dc1.trellis", "server.dc2.trellis"}, "dc2", false},
		{"two others", []string{"server.dc2.trellis", "server.dc3.trellis"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := otherServerDatacenter(tt.names, "dc1", "trellis")
			if got != tt.want || (err != nil) != tt.err {
				t.Errorf("otherServerDatacenter(%q) = %q, %v; want %q, error %v", tt.names, got, err, tt.want, tt.err)
			}
		})
	}
}

// Raft takes the servers of this datacenter alone; the server RPCs' listener
// also takes a server certificate of the cluster CA naming another
// datacenter's server, and records which datacenter the peer is a server
// of. Neither takes a client certificate, nor another datacenter's Connect
// leaf, which it could not place under that datacenter's CA.
func TestServerPortScopes(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	root := newConnectCA(t, testTD)
	srv.SetConnectRoots(testTD, []*x509.Certificate{root.signer.Cert}, []*x509.Certificate{root.signer.Cert})
	port, err := srv.ServerPort()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		client      *tls.Config
		raft, rpc   string // the refusal of each, "" when taken
		rpcPeerOfDC string
	}{
		{"a server of this datacenter", rawClient(p.cert(p.ca, KindServer, "dc1")), "", "", "dc1"},
		{"a Connect server leaf of this datacenter", presenting(root.serverLeaf(t, testTD, "dc1", "s-2")), "", "", "dc1"},
		{"a server of another datacenter", rawClient(p.cert(p.ca, KindServer, "dc2")), "not a certificate of server.dc1.trellis", "", "dc2"},
		{"a client of another datacenter", rawClient(p.cert(p.ca, KindClient, "dc2")), "not a certificate of server.dc1.trellis", "not a certificate of server.dc1.trellis", ""},
		{"a Connect server leaf of another datacenter", presenting(root.serverLeaf(t, testTD, "dc2", "s-2")), "not the SPIFFE id of a server of datacenter dc1", "not the SPIFFE id of a server of datacenter dc1", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, serverErr, _ := handshake(t, port.Incoming(), tc.client)
			if (tc.raft == "") != (serverErr == nil) || (serverErr != nil && !strings.Contains(serverErr.Error(), tc.raft)) {
				t.Errorf("Raft: %v, want refusal %q", serverErr, tc.raft)
			}
			var seen ServerPeer
			_, serverErr, _ = handshake(t, srv.incomingServer(nil, anyDatacenter, &seen), tc.client)
			if (tc.rpc == "") != (serverErr == nil) || (serverErr != nil && !strings.Contains(serverErr.Error(), tc.rpc)) {
				t.Errorf("server RPCs: %v, want refusal %q", serverErr, tc.rpc)
			}
			if seen.Datacenter != tc.rpcPeerOfDC {
				t.Errorf("server RPCs saw a server of %q, want %q", seen.Datacenter, tc.rpcPeerOfDC)
			}
		})
	}
}
