package leaves

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"trellis.dev/trellis/internal/ca"
)

// localCA signs with a real root, in process, so that the cache's timing
// runs in a synctest bubble (whose clock a network server cannot share).
// It checks every CSR as the servers do.
type localCA struct {
	td  string
	ttl time.Duration

	mu       sync.Mutex
	signer   ca.Signer
	rootID   string
	signedAt []time.Time
	limited  int // the next calls refused over the limit
	roots    []*x509.Certificate
}

func newLocalCA(t *testing.T) *localCA {
	t.Helper()
	c := &localCA{td: "11111111-2222-3333-4444-555555555555.trellis", ttl: 72 * time.Hour}
	c.rotate(t)
	return c
}

// rotate makes a new root the active one.
func (c *localCA) rotate(t *testing.T) {
	t.Helper()
	cert, key, err := ca.NewRoot(ca.RootOptions{TrustDomain: c.td, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.KeyID(cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.signer, c.rootID = ca.Signer{Cert: cert, Key: key}, id
	c.roots = append(c.roots, cert)
}

func (c *localCA) Roots() Roots {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Roots{TrustDomain: c.td, ActiveID: c.rootID, Certs: append([]*x509.Certificate{}, c.roots...), Active: c.signer.Cert}
}

func (c *localCA) Sign(_ context.Context, csrPEM string) (string, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.limited > 0 {
		c.limited--
		return "", "", &RateLimitedError{RetryAfter: 5 * time.Second, Err: errors.New("over the limit")}
	}
	csr, err := ca.ParseCSR([]byte(csrPEM))
	if err != nil {
		return "", "", err
	}
	id, err := ca.CheckCSR(csr, ca.CSRPolicy{TrustDomain: c.td, Datacenter: "dc1"})
	if err != nil {
		return "", "", err
	}
	leaf, err := ca.SignLeaf(csr, id, c.signer, c.ttl, time.Now())
	if err != nil {
		return "", "", err
	}
	c.signedAt = append(c.signedAt, time.Now())
	return string(ca.EncodeCerts(leaf)), "", nil
}

func (c *localCA) signatures() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time{}, c.signedAt...)
}

func newCache(t *testing.T, signer Signer) *Cache {
	t.Helper()
	c, err := New(Config{Signer: signer, Datacenter: "dc1", Instance: "i-1", ResignWindow: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verify checks cert as a TLS peer trusting pool would.
func verify(t *testing.T, what string, cert *tls.Certificate, roots *x509.CertPool) {
	t.Helper()
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("%s does not verify: %v", what, err)
	}
}

// The agent's leaf and a service's are signed once roots are known; each
// is renewed between 60 % and 90 % of its life, not before.
func TestCacheSignsAndRenews(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		auth := newLocalCA(t)
		c := newCache(t, auth)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go c.Run(ctx)
		if err := c.SetServices([]Key{ServiceKey("default", "web")}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := len(auth.signatures()); n != 0 {
			t.Fatalf("%d signatures before any root is known", n)
		}
		start := time.Now()
		c.SetRoots(auth.Roots())
		agentCert, pool, err := c.Get(ctx, AgentKey)
		if err != nil {
			t.Fatal(err)
		}
		verify(t, "the agent leaf", agentCert, pool)
		if got, want := agentCert.Leaf.URIs[0].String(), "spiffe://"+auth.td+"/agent/client/dc/dc1/id/i-1"; got != want {
			t.Fatalf("agent leaf id %s, want %s", got, want)
		}
		web, _, err := c.Get(ctx, ServiceKey("default", "web"))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := web.Leaf.URIs[0].String(), "spiffe://"+auth.td+"/ns/default/dc/dc1/svc/web"; got != want {
			t.Fatalf("web leaf id %s, want %s", got, want)
		}
		if c.AgentCertificate() != agentCert {
			t.Fatal("AgentCertificate is not the agent's leaf")
		}
		synctest.Wait()
		if n := len(auth.signatures()); n != 2 {
			t.Fatalf("%d signatures, want 2", n)
		}

		// Nothing more until 60 % of the life; everything by 90 %.
		life := agentCert.Leaf.NotAfter.Sub(agentCert.Leaf.NotBefore)
		time.Sleep(time.Until(agentCert.Leaf.NotBefore.Add(life*6/10)) - time.Second)
		synctest.Wait()
		if n := len(auth.signatures()); n != 2 {
			t.Fatalf("%d signatures before 60 %% of the life", n)
		}
		time.Sleep(life * 3 / 10)
		synctest.Wait()
		sigs := auth.signatures()
		if len(sigs) != 4 {
			t.Fatalf("%d signatures by 90 %% of the life, want 4", len(sigs))
		}
		renewed := c.AgentCertificate()
		if renewed == agentCert || renewed.Leaf.SerialNumber.Cmp(agentCert.Leaf.SerialNumber) == 0 {
			t.Fatal("the agent leaf was not renewed")
		}
		for _, s := range sigs[2:] {
			if d := s.Sub(start); d < life*6/10-time.Minute || d > life*9/10 {
				t.Fatalf("renewed %v after the first signature, outside 60-90 %% of %v", d, life)
			}
		}
	})
}

// A root change re-signs every leaf within the window, each at its own
// moment, and the new leaves are of the new root.
func TestCacheResignsWithinTheWindowOnRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		auth := newLocalCA(t)
		c := newCache(t, auth)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go c.Run(ctx)
		var keys []Key
		for _, s := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
			keys = append(keys, ServiceKey("default", s))
		}
		if err := c.SetServices(keys); err != nil {
			t.Fatal(err)
		}
		c.SetRoots(auth.Roots())
		for _, k := range append(keys, AgentKey) {
			if _, _, err := c.Get(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		before := len(auth.signatures())

		auth.rotate(t)
		rotatedAt := time.Now()
		c.SetRoots(auth.Roots())
		synctest.Wait()
		if n := len(auth.signatures()) - before; n > 0 {
			// r may be 0 for a leaf; then it signs at once, which is
			// within the window. It must not be all of them.
			if n == len(keys)+1 {
				t.Fatalf("all %d leaves were re-signed at once", n)
			}
		}
		time.Sleep(30*time.Second + time.Millisecond)
		synctest.Wait()
		sigs := auth.signatures()[before:]
		if len(sigs) != len(keys)+1 {
			t.Fatalf("%d leaves re-signed within the window, want %d", len(sigs), len(keys)+1)
		}
		distinct := map[time.Time]bool{}
		for _, s := range sigs {
			if d := s.Sub(rotatedAt); d < 0 || d > 30*time.Second {
				t.Fatalf("re-signed %v after the rotation, outside the 30s window", d)
			}
			distinct[s] = true
		}
		if len(distinct) < 2 {
			t.Fatal("every leaf was re-signed at the same moment: no jitter")
		}
		newOnly := x509.NewCertPool()
		newOnly.AddCert(auth.Roots().Active)
		for _, k := range append(keys, AgentKey) {
			cert, _, err := c.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			verify(t, k.String()+"'s new leaf against the new root alone", cert, newOnly)
		}
		// And nothing more until renewal.
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(auth.signatures()) - before; n != len(keys)+1 {
			t.Fatalf("%d re-signatures an hour after the rotation, want %d", n, len(keys)+1)
		}
	})
}

// Over the servers' limit, the cache waits at least the retry-after the
// server sent before it asks again.
func TestCacheHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		auth := newLocalCA(t)
		auth.limited = 2
		c := newCache(t, auth)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go c.Run(ctx)
		start := time.Now()
		c.SetRoots(auth.Roots())
		synctest.Wait()
		if c.AgentCertificate() != nil {
			t.Fatal("signed while the server refused")
		}
		if _, _, err := c.Get(ctx, AgentKey); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d < 10*time.Second {
			t.Fatalf("signed %v after two refusals of retry-after 5s each", d)
		}
		if f := c.Leaves()[0].Failures; f != 0 {
			t.Fatalf("failures %d after a signature", f)
		}
	})
}

// A service's leaf is dropped with the last task of the service; Get
// then says the agent runs none.
func TestCacheDropsLeavesOfGoneServices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		auth := newLocalCA(t)
		c := newCache(t, auth)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go c.Run(ctx)
		c.SetRoots(auth.Roots())
		web := ServiceKey("default", "web")
		if err := c.SetServices([]Key{web}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Get(ctx, web); err != nil {
			t.Fatal(err)
		}
		if err := c.SetServices(nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Get(ctx, web); !errors.Is(err, ErrNotCached) {
			t.Fatalf("Get of a gone service = %v, want ErrNotCached", err)
		}
		if c.AgentCertificate() == nil {
			t.Fatal("the agent's leaf went with the services")
		}
		if got := len(c.Leaves()); got != 1 {
			t.Fatalf("%d leaves, want the agent's alone", got)
		}
		if err := c.SetServices([]Key{{Namespace: "default"}}); err == nil {
			t.Fatal("a key without a service was taken")
		}
	})
}

// An agent leaf that expired while the servers could not sign is no
// longer offered for the agent's handshakes: they would refuse it, and
// the cache could never ask for the next one.
func TestAnExpiredAgentLeafIsNotPresented(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		auth := newLocalCA(t)
		c := newCache(t, auth)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go c.Run(ctx)
		c.SetRoots(auth.Roots())
		cert, _, err := c.Get(ctx, AgentKey)
		if err != nil {
			t.Fatal(err)
		}
		auth.mu.Lock()
		auth.limited = 1 << 30 // the servers refuse from now on
		auth.mu.Unlock()
		time.Sleep(time.Until(cert.Leaf.NotAfter) - time.Second)
		if c.AgentCertificate() != cert {
			t.Fatal("the leaf is not presented while it is valid")
		}
		time.Sleep(2 * time.Second)
		if got := c.AgentCertificate(); got != nil {
			t.Fatalf("an expired leaf (not after %v) is presented at %v", cert.Leaf.NotAfter, time.Now())
		}
	})
}
