package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"
)

// handshake runs a handshake of client against server over a pipe and
// returns both sides' errors.
func handshake(server, client *tls.Config) (serverErr, clientErr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(a, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3 sends the client's certificate after the client
			// considers the handshake done: read to see the verdict.
			a.Close()
		}
		done <- err
	}()
	c := tls.Client(b, client)
	clientErr = c.Handshake()
	if clientErr != nil {
		b.Close()
	}
	return <-done, clientErr
}

// TestIdentityHandshake: two proxies of one CA accept each other, the
// client checks the SPIFFE id it expects, and a new leaf applies to the
// next handshake.
func TestIdentityHandshake(t *testing.T) {
	c := newTestCA(t, testTD, time.Now())
	api, web := newTestProxy(t), newTestProxy(t)
	if err := api.Update(testSnapshot(t, c, "api", "tcp", "127.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	if err := web.Update(testSnapshot(t, c, "web", "tcp", "127.0.0.1:1")); err != nil {
		t.Fatal(err)
	}
	if se, ce := handshake(api.ServerTLS(), web.ClientTLS(spiffeOf(testTD, "default", "api"))); se != nil || ce != nil {
		t.Fatalf("handshake: server %v, client %v", se, ce)
	}
	_, ce := handshake(api.ServerTLS(), web.ClientTLS(spiffeOf(testTD, "default", "db")))
	var he *HandshakeError
	if !errors.As(ce, &he) || he.Reason != ReasonSPIFFE {
		t.Fatalf("a server of another service: client error %v, want %s", ce, ReasonSPIFFE)
	}
	// A renewed leaf: the next handshake presents it.
	s2 := testSnapshot(t, c, "api", "tcp", "127.0.0.1:1")
	s2.Version = "v2"
	if err := api.Update(s2); err != nil {
		t.Fatal(err)
	}
	cfg := web.ClientTLS(spiffeOf(testTD, "default", "api"))
	var seen []byte
	cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error { seen = raw[0]; return nil }
	if se, ce := handshake(api.ServerTLS(), cfg); se != nil || ce != nil {
		t.Fatalf("handshake after renewal: server %v, client %v", se, ce)
	}
	if want := api.state.Load().cert.Certificate[0]; string(seen) != string(want) {
		t.Error("the handshake after the renewal did not present the new leaf")
	}
}
