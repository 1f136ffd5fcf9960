package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/mesh"
)

// The proxy's ports and its user, inside a task's network namespace.
const (
	// InboundPort is where other proxies connect (mTLS).
	InboundPort = 15000
	// OutboundPort is the transparent outbound listener, where the
	// redirect rules send the task's outbound TCP.
	OutboundPort = 15001
	// AdminAddr serves /ready, /stats and /config.
	AdminAddr = "127.0.0.1:19000"
	// UID and GID are the proxy's user and group, which the redirect
	// rules skip.
	UID = 1337
	GID = 1337
)

// Defaults of Config.
const (
	DefaultHeaderTimeout    = 10 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
)

// Config configures a Proxy.
type Config struct {
	Log *slog.Logger // slog.Default() when nil
	// Now is the clock certificates are verified at; time.Now when nil.
	Now func() time.Time
	// HeaderTimeout bounds reading an HTTP request's headers (and the
	// HTTP/2 preface), against slowloris clients.
	HeaderTimeout time.Duration
	// HandshakeTimeout bounds a TLS handshake.
	HandshakeTimeout time.Duration
	// IdleTimeout closes an idle HTTP connection.
	IdleTimeout time.Duration
}

// Proxy is one task's sidecar proxy.
type Proxy struct {
	cfg   Config
	log   *slog.Logger
	stats *Stats

	state atomic.Pointer[state]
	// updateMu makes Updates one at a time.
	updateMu sync.Mutex
	// updated is closed and replaced whenever a snapshot is taken.
	mu      sync.Mutex
	updated chan struct{}

	conns connSet

	listening sync.Map // component name → net.Addr
	running   atomic.Bool

	drainOnce sync.Once
	draining  chan struct{} // closed by Drain
}

// state is a snapshot with what the proxy derives from it once: the
// parsed certificates and the compiled intentions.
type state struct {
	snap       *pbproxy.Snapshot
	self       mesh.Service
	selfID     string
	cert       *tls.Certificate
	roots      *x509.CertPool
	intentions []mesh.Intentions
	def        mesh.Action
}

// component is a part of the proxy that Run serves while a snapshot asks
// for it (the inbound listener, the outbound listeners, the admin port).
// Each file that defines one registers it in an init function.
type component struct {
	name string
	run  func(ctx context.Context, p *Proxy) error
}

var components []component

// New makes a proxy holding no snapshot yet.
func New(cfg Config) (*Proxy, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HeaderTimeout < 0 || cfg.HandshakeTimeout < 0 || cfg.IdleTimeout < 0 {
		return nil, errors.New("proxy config: a timeout is negative")
	}
	if cfg.HeaderTimeout == 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	p := &Proxy{cfg: cfg, log: cfg.Log, stats: newStats(), updated: make(chan struct{}), draining: make(chan struct{})}
	p.conns.m = make(map[*trackedConn]struct{})
	return p, nil
}

// Stats are the proxy's metrics.
func (p *Proxy) Stats() *Stats { return p.stats }

// Update checks snap and makes it the current snapshot. A snapshot that
// does not check is refused: the previous one stays, the refusal is
// counted, and the error names the field. Established inbound connections
// whose peer the new snapshot no longer allows are closed.
func (p *Proxy) Update(snap *pbproxy.Snapshot) error {
	p.updateMu.Lock()
	defer p.updateMu.Unlock()
	st, err := compile(snap)
	if err != nil {
		p.stats.SnapshotRejections.Inc()
		p.log.Warn("proxy: snapshot refused, keeping the previous one", "err", err)
		return err
	}
	prev := p.state.Swap(st)
	p.stats.SnapshotUpdates.Inc()
	p.mu.Lock()
	close(p.updated)
	p.updated = make(chan struct{})
	p.mu.Unlock()
	p.recheckConns(prev, st)
	return nil
}

// Snapshot is the current snapshot, nil before the first. It must not be
// modified.
func (p *Proxy) Snapshot() *pbproxy.Snapshot {
	if st := p.state.Load(); st != nil {
		return st.snap
	}
	return nil
}

// Drain starts the proxy's graceful shutdown (the task is stopping): the
// inbound listener closes, so that new connections are refused and their
// clients retry another instance; established inbound connections
// finish (HTTP/1.1 ones after their request in flight, HTTP/2 ones told
// by GOAWAY); the outbound side keeps serving the app. Run returns when
// its context ends, closing what is left.
func (p *Proxy) Drain() {
	p.drainOnce.Do(func() {
		p.log.Info("proxy: draining")
		close(p.draining)
	})
}

// Draining says whether Drain was called.
func (p *Proxy) Draining() bool {
	select {
	case <-p.draining:
		return true
	default:
		return false
	}
}

// changed is closed at the next Update.
func (p *Proxy) changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.updated
}

// Run waits for the first snapshot, then serves every component until
// ctx ends or one fails.
func (p *Proxy) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("proxy: already running")
	}
	for p.state.Load() == nil {
		select {
		case <-ctx.Done():
			return nil
		case <-p.changed():
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(components))
	for _, c := range components {
		go func() {
			err := c.run(ctx, p)
			if err != nil {
				err = fmt.Errorf("%s: %w", c.name, err)
			}
			errs <- err
		}()
	}
	var first error
	for range components {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	if ctx.Err() != nil && first != nil && errors.Is(first, context.Canceled) {
		return nil
	}
	return first
}

// Addr is the address a component (inbound, outbound, admin) listens on,
// nil while it does not.
func (p *Proxy) Addr(component string) net.Addr {
	if a, ok := p.listening.Load(component); ok {
		return a.(net.Addr)
	}
	return nil
}

func (p *Proxy) setListening(component string, a net.Addr) {
	if a == nil {
		p.listening.Delete(component)
		return
	}
	p.listening.Store(component, a)
}

// compile checks a snapshot and derives the proxy's state from it. Its
// errors name the field.
func compile(snap *pbproxy.Snapshot) (*state, error) {
	if snap == nil {
		return nil, errors.New("snapshot: none")
	}
	if snap.GetVersion() == "" {
		return nil, errors.New("snapshot.version: empty")
	}
	id := snap.GetIdentity()
	if err := ca.CheckTrustDomain(id.GetTrustDomain()); err != nil {
		return nil, fmt.Errorf("snapshot.identity.trust_domain: %w", err)
	}
	parsed, err := ca.ParseIDString(id.GetSpiffeId())
	if err != nil {
		return nil, fmt.Errorf("snapshot.identity.spiffe_id: %w", err)
	}
	sid, ok := parsed.(ca.ServiceID)
	if !ok {
		return nil, fmt.Errorf("snapshot.identity.spiffe_id: %q is not a service's id", id.GetSpiffeId())
	}
	if sid.TrustDomain != id.GetTrustDomain() || sid.Namespace != id.GetNamespace() || sid.Service != id.GetService() || sid.Datacenter != id.GetDatacenter() {
		return nil, fmt.Errorf("snapshot.identity.spiffe_id: %q does not name the identity's trust domain, namespace, datacenter and service", id.GetSpiffeId())
	}
	st := &state{snap: proto.Clone(snap).(*pbproxy.Snapshot), self: mesh.Service{Namespace: sid.Namespace, Name: sid.Service}, selfID: id.GetSpiffeId()}

	certs := snap.GetCertificates()
	cert, err := tls.X509KeyPair(certs.GetLeafPem(), certs.GetKeyPem())
	if err != nil {
		return nil, fmt.Errorf("snapshot.certificates.leaf_pem, key_pem: %w", err)
	}
	if len(cert.Leaf.URIs) != 1 || cert.Leaf.URIs[0].String() != id.GetSpiffeId() {
		return nil, fmt.Errorf("snapshot.certificates.leaf_pem: the leaf does not carry exactly the SPIFFE id %s", id.GetSpiffeId())
	}
	st.cert = &cert
	if len(certs.GetRootsPem()) == 0 {
		return nil, errors.New("snapshot.certificates.roots_pem: empty")
	}
	st.roots = x509.NewCertPool()
	for i, r := range certs.GetRootsPem() {
		cs, err := ca.ParseCerts(r)
		if err != nil {
			return nil, fmt.Errorf("snapshot.certificates.roots_pem[%d]: %w", i, err)
		}
		for _, c := range cs {
			if !c.IsCA {
				return nil, fmt.Errorf("snapshot.certificates.roots_pem[%d]: %q is not a CA certificate", i, c.Subject.CommonName)
			}
			st.roots.AddCert(c)
		}
	}
	// The leaf must chain to the roots it comes with: a proxy that cannot
	// prove its identity to its peers would fail every call. Checked
	// within the leaf's life, not at now: an expired leaf is the agent's
	// to renew, and refusing it would also refuse the intentions beside it.
	if _, err := verifyChain(cert.Leaf, leafChain(&cert), st.roots, cert.Leaf.NotBefore.Add(time.Second), x509.ExtKeyUsageServerAuth); err != nil {
		return nil, fmt.Errorf("snapshot.certificates.leaf_pem: %w", err)
	}

	if in := snap.GetInbound(); in != nil {
		if err := checkHostPort(in.GetAddress()); err != nil {
			return nil, fmt.Errorf("snapshot.inbound.address: %w", err)
		}
		if err := checkHostPort(in.GetAppAddress()); err != nil {
			return nil, fmt.Errorf("snapshot.inbound.app_address: %w", err)
		}
		switch in.GetProtocol() {
		case "tcp", "http", "grpc":
		default:
			return nil, fmt.Errorf("snapshot.inbound.protocol: %q is none of tcp, http, grpc", in.GetProtocol())
		}
		switch a := mesh.Action(in.GetDefaultIntention()); a {
		case mesh.Allow, mesh.Deny:
			st.def = a
		default:
			return nil, fmt.Errorf("snapshot.inbound.default_intention: %q is neither allow nor deny", in.GetDefaultIntention())
		}
		if in.GetIntentions() != nil {
			compiled, err := mesh.Compile(st.self, in.GetIntentions())
			if err != nil {
				return nil, fmt.Errorf("snapshot.inbound.intentions.%w", err)
			}
			st.intentions = []mesh.Intentions{compiled}
		}
	}
	for i, u := range snap.GetUpstreams() {
		if err := checkUpstream(u, true); err != nil {
			return nil, fmt.Errorf("snapshot.upstreams[%d].%w", i, err)
		}
	}
	if out := snap.GetOutbound(); out != nil {
		if err := checkHostPort(out.GetAddress()); err != nil {
			return nil, fmt.Errorf("snapshot.outbound.address: %w", err)
		}
		switch out.GetUnknown() {
		case "passthrough", "deny":
		default:
			return nil, fmt.Errorf("snapshot.outbound.unknown: %q is neither passthrough nor deny", out.GetUnknown())
		}
		for i, u := range out.GetDestinations() {
			if err := checkUpstream(u, false); err != nil {
				return nil, fmt.Errorf("snapshot.outbound.destinations[%d].%w", i, err)
			}
		}
	}
	if a := snap.GetAdminAddress(); a != "" {
		if err := checkHostPort(a); err != nil {
			return nil, fmt.Errorf("snapshot.admin_address: %w", err)
		}
	}
	return st, nil
}

// checkUpstream checks one upstream; explicit ones have a bind address.
// Its errors start with the field, for the caller to prefix.
func checkUpstream(u *pbproxy.Upstream, explicit bool) error {
	if u.GetService() == "" || u.GetNamespace() == "" {
		return errors.New("service, namespace: empty")
	}
	if explicit {
		if err := checkHostPort(u.GetBindAddress()); err != nil {
			return fmt.Errorf("bind_address: %w", err)
		}
	}
	switch u.GetProtocol() {
	case "tcp", "http", "grpc":
	default:
		return fmt.Errorf("protocol: %q is none of tcp, http, grpc", u.GetProtocol())
	}
	parsed, err := ca.ParseIDString(u.GetSpiffeId())
	if err != nil {
		return fmt.Errorf("spiffe_id: %w", err)
	}
	if _, ok := parsed.(ca.ServiceID); !ok {
		return fmt.Errorf("spiffe_id: %q is not a service's id", u.GetSpiffeId())
	}
	switch u.GetLoadBalancer() {
	case "", "round_robin", "least_request":
	default:
		return fmt.Errorf("load_balancer: %q is neither round_robin nor least_request", u.GetLoadBalancer())
	}
	for j, e := range u.GetEndpoints() {
		if err := checkHostPort(e.GetAddress()); err != nil {
			return fmt.Errorf("endpoints[%d].address: %w", j, err)
		}
		if a := e.GetAppAddress(); a != "" {
			if err := checkHostPort(a); err != nil {
				return fmt.Errorf("endpoints[%d].app_address: %w", j, err)
			}
		}
	}
	return nil
}

func checkHostPort(s string) error {
	if s == "" {
		return errors.New("empty")
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", s, err)
	}
	if host != "" && net.ParseIP(host) == nil {
		return fmt.Errorf("%q: the host is not an IP address", s)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q: bad port", s)
	}
	return nil
}
