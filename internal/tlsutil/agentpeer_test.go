package tlsutil

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

// ConnectAgent names the instance of an agent leaf of the Connect CA of
// this datacenter, and nothing else: not a service's leaf, not another
// datacenter's agent, not a leaf of roots it does not know, not a client
// certificate of the cluster CA (which the public port's handshake takes
// too).
func TestConnectAgent(t *testing.T) {
	p := newPKI(t)
	srv := p.configurator(p.serverConfig(p.cert(p.ca, KindServer, "dc1")))
	const td = "11111111-2222-3333-4444-555555555555.trellis"
	agentLeaf, root := connectLeaf(t, td, "spiffe://"+td+"/agent/client/dc/dc1/id/i-1")
	serviceLeaf, serviceRoot := connectLeaf(t, td, "spiffe://"+td+"/ns/default/dc/dc1/svc/web")
	otherDC, otherDCRoot := connectLeaf(t, td, "spiffe://"+td+"/agent/client/dc/dc2/id/i-1")
	block, _ := pem.Decode(p.cert(p.ca, KindClient, "dc1").CertPEM)
	clusterClient, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	parsed := func(c tls.Certificate) []*x509.Certificate {
		var out []*x509.Certificate
		for _, der := range c.Certificate {
			x, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, x)
		}
		return out
	}
	srv.SetConnectRoots(td, []*x509.Certificate{root, serviceRoot, otherDCRoot}, []*x509.Certificate{root, serviceRoot, otherDCRoot})
	for _, tc := range []struct {
		name  string
		certs []*x509.Certificate
		want  string // the instance, or a part of the error
		ok    bool
	}{
		{"an agent leaf of this datacenter", parsed(agentLeaf), "i-1", true},
		{"a service's leaf", parsed(serviceLeaf), "not the SPIFFE id of an agent", false},
		{"an agent leaf of another datacenter", parsed(otherDC), "of datacenter dc1", false},
		{"a client certificate of the cluster CA", []*x509.Certificate{clusterClient}, "URI SANs", false},
		{"nothing", nil, "no certificate", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := srv.ConnectAgent(tc.certs)
			if tc.ok {
				if err != nil || got != tc.want {
					t.Fatalf("ConnectAgent = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ConnectAgent = %q, %v; want an error saying %q", got, err, tc.want)
			}
		})
	}
	// Roots it does not know: refused.
	srv.SetConnectRoots(td, []*x509.Certificate{serviceRoot}, []*x509.Certificate{serviceRoot})
	if got, err := srv.ConnectAgent(parsed(agentLeaf)); err == nil {
		t.Fatalf("an agent leaf of unknown roots taken for %q", got)
	}
}
