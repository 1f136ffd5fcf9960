package leaves

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"sort"
	"sync"
	"time"

	"trellis.dev/trellis/internal/ca"
)

// DefaultResignWindow is the window over which a root change's
// re-signing is spread (Config.ResignWindow).
const DefaultResignWindow = ca.DefaultResignWindow

// Signer has the servers sign a CSR (PEM): the leaf and the chain a TLS
// peer sends after it, both PEM. A refusal for the servers' signing limit
// is a *RateLimitedError.
type Signer interface {
	Sign(ctx context.Context, csrPEM string) (certPEM, chainPEM string, err error)
}

// RateLimitedError is a server's refusal over its signing limit: retry no
// sooner than RetryAfter.
type RateLimitedError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *RateLimitedError) Error() string { return e.Err.Error() }
func (e *RateLimitedError) Unwrap() error { return e.Err }

// Config configures a Cache.
type Config struct {
	// Signer has the servers sign. Required.
	Signer Signer
	// Datacenter and Instance are the agent's: its leaves are of that
	// datacenter, its agent leaf names that instance. Required.
	Datacenter, Instance string
	// ResignWindow spreads a root change's re-signing
	// (DefaultResignWindow when zero).
	ResignWindow time.Duration
	// KeyType is the leaves' key type (ECDSA P-256 when zero).
	KeyType ca.KeyType
	// Rand draws uniformly from [0, 1) (math/rand/v2's Float64 when nil).
	Rand func() float64
	// SignTimeout bounds one signature (10 s when zero).
	SignTimeout time.Duration
	Logger      *slog.Logger
}

// Cache holds the agent's leaves; see the package comment. Run keeps
// them signed; SetRoots and SetServices tell it what changed.
type Cache struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	roots Roots
	pool  *x509.CertPool
	// signers are the CAs that sign the server leaves of the agent's
	// datacenter (ca.DatacenterSigners of the roots).
	signers []*x509.Certificate
	entries map[Key]*entry
	changed chan struct{} // closed and replaced at every change
	wake    chan struct{} // the loop looks again
}

// entry is one leaf: its schedule, and the leaf once signed.
type entry struct {
	sched ca.LeafSchedule
	cert  *tls.Certificate // nil until signed
	id    string           // the SPIFFE id of cert
}

// New makes a cache holding the agent's leaf (to be signed once Run has
// roots).
func New(cfg Config) (*Cache, error) {
	switch {
	case cfg.Signer == nil:
		return nil, errors.New("leaves: Signer is required")
	case cfg.Datacenter == "":
		return nil, errors.New("leaves: Datacenter is required")
	case cfg.Instance == "":
		return nil, errors.New("leaves: Instance is required")
	}
	if cfg.ResignWindow <= 0 {
		cfg.ResignWindow = DefaultResignWindow
	}
	if cfg.KeyType == (ca.KeyType{}) {
		cfg.KeyType = ca.KeyType{Algorithm: ca.AlgorithmEC, Bits: 256}
	}
	if err := cfg.KeyType.Validate(); err != nil {
		return nil, fmt.Errorf("leaves: KeyType: %w", err)
	}
	if cfg.Rand == nil {
		cfg.Rand = mrand.Float64
	}
	if cfg.SignTimeout <= 0 {
		cfg.SignTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Cache{
		cfg: cfg, log: cfg.Logger,
		entries: map[Key]*entry{AgentKey: {}},
		changed: make(chan struct{}), wake: make(chan struct{}, 1),
	}, nil
}

func (c *Cache) broadcastLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// SetRoots takes the roots as the servers list them now. When the active
// root changed, every leaf signed under another is re-signed within the
// window.
func (c *Cache) SetRoots(r Roots) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.ActiveID != c.roots.ActiveID && c.roots.ActiveID != "" {
		c.log.Info("the Connect CA's active root changed; re-signing the leaves within the window",
			"old_root", c.roots.ActiveID, "new_root", r.ActiveID, "window", c.cfg.ResignWindow)
	}
	c.roots, c.pool = r, r.Pool()
	signers, err := ca.DatacenterSigners(r.Stored, c.cfg.Datacenter)
	if err != nil {
		c.log.Warn("a root's certificates do not parse; skipped as signers of this datacenter's servers", "err", err)
	}
	c.signers = signers
	now := time.Now()
	for _, e := range c.entries {
		e.sched = ca.OnRootChange(e.sched, r.ActiveID, now, c.cfg.ResignWindow, c.cfg.Rand())
	}
	c.broadcastLocked()
}

// SetServices says which services the agent's tasks are of now: a leaf
// is signed for each new one, and those of services no longer listed are
// dropped. The agent's own leaf always stays.
func (c *Cache) SetServices(keys []Key) error {
	want := make(map[Key]bool, len(keys))
	for _, k := range keys {
		if k.Agent {
			continue
		}
		if err := k.check(); err != nil {
			return err
		}
		want[k] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := false
	for k := range c.entries {
		if !k.Agent && !want[k] {
			delete(c.entries, k)
			changed = true
		}
	}
	for k := range want {
		if c.entries[k] == nil {
			c.entries[k] = &entry{}
			changed = true
		}
	}
	if changed {
		c.broadcastLocked()
	}
	return nil
}

// Changed is closed at the cache's next change: a leaf signed or renewed,
// the roots or the services changed.
func (c *Cache) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// ErrNotCached is returned by Get for a service the agent runs no task
// of.
var ErrNotCached = errors.New("no leaf for this service: the agent runs no task of it")

// Get returns key's leaf and a pool of the roots to verify peers with,
// waiting until the leaf is signed or ctx ends. The certificate holds the
// leaf, its chain and its key; it is never changed once returned (a
// renewal makes a new one), so a consumer calls Get again, or uses
// GetCertificate, to follow renewals.
func (c *Cache) Get(ctx context.Context, key Key) (*tls.Certificate, *x509.CertPool, error) {
	for {
		c.mu.Lock()
		e, ch := c.entries[key], c.changed
		var cert *tls.Certificate
		if e != nil {
			cert = e.cert
		}
		pool := c.pool
		c.mu.Unlock()
		switch {
		case e == nil:
			return nil, nil, fmt.Errorf("%s: %w", key, ErrNotCached)
		case cert != nil:
			return cert, pool, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-ch:
		}
	}
}

// AgentCertificate is the agent's leaf now, for a tls.Config's
// GetClientCertificate: nil before the first is signed, and nil when the
// one it holds is not valid now (it expired while the servers could not
// sign a new one). The servers would refuse such a leaf at the
// handshake, and the cache's own connection, which asks for the next
// leaf, presents it too: without one it falls back to TLS that checks
// the servers only, as at the first join.
func (c *Cache) AgentCertificate() *tls.Certificate {
	c.mu.Lock()
	cert := c.entries[AgentKey].cert
	c.mu.Unlock()
	if cert == nil {
		return nil
	}
	if now := time.Now(); now.Before(cert.Leaf.NotBefore) || !now.Before(cert.Leaf.NotAfter) {
		return nil
	}
	return cert
}

// ConnectCertificate is AgentCertificate: with the roots, the cache is the
// agent's tlsutil.ConnectSource, what it talks to the servers with.
func (c *Cache) ConnectCertificate() *tls.Certificate { return c.AgentCertificate() }

// ConnectRoots are the trust domain and a pool of every root the servers
// list; "" and nil before the cache has them.
func (c *Cache) ConnectRoots() (trustDomain string, roots *x509.CertPool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.roots.TrustDomain == "" || len(c.roots.Certs) == 0 {
		return "", nil
	}
	return c.roots.TrustDomain, c.pool
}

// ConnectSigners are the CAs that sign the server leaves of the agent's
// datacenter: the agent takes a server's Connect leaf only from one of
// them (tlsutil.ConnectClientConfig).
func (c *Cache) ConnectSigners() []*x509.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.signers
}

// Info describes a leaf of the cache (never its key).
type Info struct {
	Key       string    `json:"key"`
	SPIFFEID  string    `json:"spiffe_id,omitempty"`
	Serial    string    `json:"serial,omitempty"`
	NotBefore time.Time `json:"not_before,omitzero"`
	NotAfter  time.Time `json:"not_after,omitzero"`
	RootID    string    `json:"root_id,omitempty"`
	RenewAt   time.Time `json:"renew_at,omitzero"`
	ResignAt  time.Time `json:"resign_at,omitzero"`
	Failures  int       `json:"failures,omitempty"`
}

// Leaves describes every leaf, the agent's first, then by key.
func (c *Cache) Leaves() []Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Info, 0, len(c.entries))
	for k, e := range c.entries {
		in := Info{Key: k.String(), SPIFFEID: e.id, RootID: e.sched.RootID, Failures: e.sched.Failures}
		if e.cert != nil {
			in.Serial = fmt.Sprintf("%x", e.cert.Leaf.SerialNumber)
			in.NotBefore, in.NotAfter = e.cert.Leaf.NotBefore, e.cert.Leaf.NotAfter
			in.RenewAt, in.ResignAt = e.sched.RenewAt, e.sched.ResignAt
		}
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].Key == "agent") != (out[j].Key == "agent") {
			return out[i].Key == "agent"
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Run keeps the leaves signed until ctx ends: it signs each leaf when
// ca.NextSignAt says, once the roots are known.
func (c *Cache) Run(ctx context.Context) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		due, next := c.due(time.Now())
		for _, k := range due {
			if ctx.Err() != nil {
				return
			}
			c.sign(ctx, k)
		}
		if len(due) > 0 {
			continue
		}
		var fire <-chan time.Time
		if !next.IsZero() {
			if timer == nil {
				timer = time.NewTimer(time.Until(next))
			} else {
				timer.Reset(time.Until(next))
			}
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-fire:
		}
	}
}

// due lists the leaves to sign at now, and the next time one will be due
// (zero: none, or no roots yet).
func (c *Cache) due(now time.Time) (due []Key, next time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.roots.TrustDomain == "" || c.roots.ActiveID == "" {
		return nil, time.Time{}
	}
	for k, e := range c.entries {
		at := ca.NextSignAt(e.sched)
		if !at.After(now) {
			due = append(due, k)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	// The agent's leaf first: the agent's own connection needs it.
	sort.Slice(due, func(i, j int) bool { return due[i].Agent && !due[j].Agent })
	return due, next
}

// sign makes a key and a CSR for k, has the servers sign it and stores
// the leaf, or records the failure.
func (c *Cache) sign(ctx context.Context, k Key) {
	c.mu.Lock()
	roots := c.roots
	c.mu.Unlock()
	id := k.identity(roots.TrustDomain, c.cfg.Datacenter, c.cfg.Instance)
	cert, err := c.signLeaf(ctx, k, id)
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[k]
	if e == nil {
		return // dropped meanwhile
	}
	if err != nil {
		var rl *RateLimitedError
		var retryAfter time.Duration
		if errors.As(err, &rl) {
			retryAfter = rl.RetryAfter
		}
		e.sched = ca.SignFailed(e.sched, now, retryAfter, c.cfg.Rand())
		c.log.Warn("cannot sign a leaf; retrying", "leaf", k.String(), "id", id.String(), "retry_at", e.sched.RetryAt, "err", err)
		c.broadcastLocked()
		return
	}
	rootID := ""
	if c.roots.signedByActive(cert.Leaf, chainOf(cert)) {
		rootID = c.roots.ActiveID
	}
	e.cert, e.id = cert, id.String()
	e.sched = ca.LeafSigned(cert.Leaf.NotBefore, cert.Leaf.NotAfter, rootID, c.cfg.Rand())
	// Roots may have changed while it was signed: a leaf not of the
	// active root is re-signed within the window.
	e.sched = ca.OnRootChange(e.sched, c.roots.ActiveID, now, c.cfg.ResignWindow, c.cfg.Rand())
	c.log.Info("signed a leaf", "leaf", k.String(), "id", e.id, "serial", fmt.Sprintf("%x", cert.Leaf.SerialNumber),
		"not_after", cert.Leaf.NotAfter, "renew_at", e.sched.RenewAt, "root", rootID)
	c.broadcastLocked()
}

func chainOf(cert *tls.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// signLeaf makes the key (which stays here) and the CSR, and has the
// servers sign it.
func (c *Cache) signLeaf(ctx context.Context, k Key, id ca.Identity) (*tls.Certificate, error) {
	key, err := ca.GenerateKey(c.cfg.KeyType)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: k.commonName(c.cfg.Instance)}, URIs: []*url.URL{id.URI()},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("make the CSR: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SignTimeout)
	defer cancel()
	certPEM, chainPEM, err := c.cfg.Signer.Sign(ctx, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})))
	if err != nil {
		return nil, err
	}
	return certificate(certPEM, chainPEM, key, id)
}

// certificate assembles what the servers signed with its key, checking
// that it is the leaf asked for.
func certificate(certPEM, chainPEM string, key crypto.Signer, id ca.Identity) (*tls.Certificate, error) {
	certs, err := ca.ParseCerts([]byte(certPEM))
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("the servers' leaf: %v", err)
	}
	leaf := certs[0]
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id.String() {
		return nil, fmt.Errorf("the servers' leaf names %v, not %s", leaf.URIs, id)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(leaf.PublicKey) {
		return nil, errors.New("the servers' leaf is not of the key sent")
	}
	out := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	if chainPEM != "" {
		chain, err := ca.ParseCerts([]byte(chainPEM))
		if err != nil {
			return nil, fmt.Errorf("the servers' chain: %v", err)
		}
		for _, ch := range chain {
			out.Certificate = append(out.Certificate, ch.Raw)
		}
	}
	return out, nil
}
