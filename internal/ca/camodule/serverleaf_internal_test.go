package camodule

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/tlsutil"
)

// handedOver is the server's TLS as the leaf maker sees it: a real
// tlsutil.Configurator, and the record of every certificate handed over
// and when.
type handedOver struct {
	*tlsutil.Configurator
	mu    sync.Mutex
	certs []*tls.Certificate
	at    []time.Time
}

func (h *handedOver) SetConnectServerCertificate(cert *tls.Certificate) {
	h.mu.Lock()
	h.certs, h.at = append(h.certs, cert), append(h.at, time.Now())
	h.mu.Unlock()
	h.Configurator.SetConnectServerCertificate(cert)
}

func (h *handedOver) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.certs)
}

func (h *handedOver) last() (*tls.Certificate, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.certs[len(h.certs)-1], h.at[len(h.at)-1]
}

func newHandedOver(t *testing.T) *handedOver {
	t.Helper()
	b, err := tlsutil.NewDevBundle("", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := tlsutil.NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	return &handedOver{Configurator: c}
}

// checkServerLeaf checks that cert is the server's leaf of server id
// "s-1" in dc1, with its chain, verifying against roots alone.
func checkServerLeaf(t *testing.T, cert *tls.Certificate, roots ...*x509.Certificate) {
	t.Helper()
	want := ca.ServerID{TrustDomain: testTD, Datacenter: "dc1", Server: "s-1"}
	if len(cert.Leaf.URIs) != 1 || cert.Leaf.URIs[0].String() != want.String() {
		t.Fatalf("the leaf names %v, want %s", cert.Leaf.URIs, want)
	}
	if !slices.Equal(cert.Leaf.DNSNames, []string{"server.dc1.trellis", "server.dc1.connect.trellis"}) {
		t.Fatalf("the leaf's DNS names are %v", cert.Leaf.DNSNames)
	}
	var chain []*x509.Certificate
	for _, der := range cert.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, c)
	}
	id, err := ca.VerifyPeer(chain, roots, time.Now())
	if err != nil || id != want {
		t.Fatalf("the leaf with its chain verifies as %v, %v; want %s", id, err, want)
	}
}

// A server signs itself a leaf as soon as its signer can sign, renews it
// between 60 % and 90 % of its life, and signs it again within the window
// when the active root changes, the new one carrying the cross-signed
// root so that peers with either root accept it. Its expiry is a metric.
func TestServerLeafLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSigner(SignerConfig{Datacenter: "dc1"})
		tlsSink := newHandedOver(t)
		reg := prometheus.NewRegistry()
		m := newServerLeaf(module.Deps{ServerCerts: tlsSink, Cluster: module.Cluster{ServerID: "s-1"}}, s, 20*time.Second, slogDiscard())
		if err := reg.Register(serverLeafCollector{m: m}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go m.Start(ctx)

		// No root yet: no leaf, no metric.
		synctest.Wait()
		if tlsSink.count() != 0 || gatherExpiry(t, reg) != nil {
			t.Fatal("a leaf before the CA can sign")
		}

		const ttl = 72 * time.Hour
		a := newTestRoot(t, time.Now())
		s.setState(&signingState{rootID: a.id, trustDomain: testTD, signer: ca.Signer{Cert: a.cert, Key: a.key}, leafTTL: ttl})
		synctest.Wait()
		if tlsSink.count() != 1 {
			t.Fatalf("%d leaves once the CA can sign, want 1", tlsSink.count())
		}
		first, _ := tlsSink.last()
		checkServerLeaf(t, first, a.cert)
		if got := tlsSink.ConnectServerCertificate(); got != first {
			t.Fatal("the server's TLS does not hold the leaf")
		}
		if e := gatherExpiry(t, reg); e == nil || *e < (ttl-time.Second).Seconds() || *e > ttl.Seconds() {
			t.Fatalf("expiry metric %v, want about %v", e, ttl)
		}

		// Renewed once, between 60 % and 90 % of its life.
		life := first.Leaf.NotAfter.Sub(first.Leaf.NotBefore)
		time.Sleep(time.Until(first.Leaf.NotBefore.Add(life * 6 / 10)))
		synctest.Wait()
		if tlsSink.count() != 1 {
			t.Fatal("renewed before 60 % of its life")
		}
		time.Sleep(time.Until(first.Leaf.NotBefore.Add(life * 9 / 10)))
		synctest.Wait()
		if tlsSink.count() != 2 {
			t.Fatalf("%d leaves at 90 %% of the first's life, want 2", tlsSink.count())
		}
		second, at := tlsSink.last()
		if at.Before(first.Leaf.NotBefore.Add(life*6/10)) || at.After(first.Leaf.NotBefore.Add(life*9/10)) {
			t.Fatalf("renewed at %v of its life", at.Sub(first.Leaf.NotBefore))
		}
		checkServerLeaf(t, second, a.cert)
		if second.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 || second.PrivateKey == first.PrivateKey {
			t.Fatal("the renewal reused the serial or the key")
		}

		// A rotation to B, cross-signed by A: a new leaf within the
		// window, not before.
		b := newTestRoot(t, time.Now())
		cross, err := ca.CrossSign(b.cert, ca.Signer{Cert: a.cert, Key: a.key}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		rotated := time.Now()
		s.setState(&signingState{rootID: b.id, trustDomain: testTD, signer: ca.Signer{Cert: b.cert, Key: b.key, Chain: []*x509.Certificate{cross}}, leafTTL: ttl})
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if tlsSink.count() != 3 {
			t.Fatalf("%d leaves a window after the rotation, want 3", tlsSink.count())
		}
		third, at := tlsSink.last()
		if at.Sub(rotated) > 20*time.Second {
			t.Fatalf("re-signed %v after the rotation, beyond the window", at.Sub(rotated))
		}
		checkServerLeaf(t, third, b.cert)
		checkServerLeaf(t, third, a.cert)

		// A change of the state under the same root (a new leaf_ttl)
		// signs nothing.
		s.setState(&signingState{rootID: b.id, trustDomain: testTD, signer: ca.Signer{Cert: b.cert, Key: b.key, Chain: []*x509.Certificate{cross}}, leafTTL: 2 * ttl})
		time.Sleep(time.Minute)
		synctest.Wait()
		if tlsSink.count() != 3 {
			t.Fatal("re-signed for a change that is not a rotation")
		}
		cancel()
	})
}

// A signer that cannot sign (its certificate expired) makes the leaf
// maker retry with backoff, keeping the leaf it has; a signer that can
// again gets a leaf signed at the next try.
func TestServerLeafRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSigner(SignerConfig{Datacenter: "dc1"})
		tlsSink := newHandedOver(t)
		m := newServerLeaf(module.Deps{ServerCerts: tlsSink, Cluster: module.Cluster{ServerID: "s-1"}}, s, time.Second, slogDiscard())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go m.Start(ctx)

		cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: testTD, TTL: time.Hour, Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		id, _ := ca.KeyID(cert.PublicKey)
		s.setState(&signingState{rootID: id, trustDomain: testTD, signer: ca.Signer{Cert: cert, Key: key}, leafTTL: 72 * time.Hour})
		synctest.Wait()
		first, _ := tlsSink.last()
		if !first.Leaf.NotAfter.Equal(cert.NotAfter) {
			t.Fatalf("the leaf ends %v, beyond its signer's %v", first.Leaf.NotAfter, cert.NotAfter)
		}
		// Past the signer's expiry, every try fails: the leaf stays.
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if tlsSink.count() < 2 || tlsSink.ConnectServerCertificate() != nil {
			// One renewal under the root before it expired; then none.
			t.Fatalf("%d leaves; the expired one still served: %v", tlsSink.count(), tlsSink.ConnectServerCertificate() != nil)
		}
		n := tlsSink.count()
		a := newTestRoot(t, time.Now())
		s.setState(&signingState{rootID: a.id, trustDomain: testTD, signer: ca.Signer{Cert: a.cert, Key: a.key}, leafTTL: 72 * time.Hour})
		time.Sleep(ca.SignRetryMax + time.Second)
		synctest.Wait()
		if tlsSink.count() != n+1 {
			t.Fatalf("%d leaves after the signer recovered, want %d", tlsSink.count(), n+1)
		}
		last, _ := tlsSink.last()
		checkServerLeaf(t, last, a.cert)
		cancel()
	})
}

// No server leaf without TLS to hand it to, or with a server id that
// cannot name a server identity.
func TestNoServerLeaf(t *testing.T) {
	s := NewSigner(SignerConfig{Datacenter: "dc1"})
	if newServerLeaf(module.Deps{Cluster: module.Cluster{ServerID: "s-1"}}, s, 0, slogDiscard()) != nil {
		t.Error("a leaf maker without TLS")
	}
	for _, id := range []string{"", "S-1", "a.b", strings.Repeat("a", 64)} {
		if newServerLeaf(module.Deps{ServerCerts: newHandedOver(t), Cluster: module.Cluster{ServerID: id}}, s, 0, slogDiscard()) != nil {
			t.Errorf("a leaf maker for server id %q", id)
		}
	}
}

func gatherExpiry(t *testing.T, reg *prometheus.Registry) *float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "trellis_ca_server_cert_expiry_seconds" {
			v := mf.GetMetric()[0].GetGauge().GetValue()
			return &v
		}
	}
	return nil
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
