package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
	"trellis.dev/trellis/internal/proxy/balance"
	"trellis.dev/trellis/internal/redirect"
)

// The outbound side: one loopback listener per explicit upstream
// (bind_address) and the transparent listener (outbound.address). Each
// connection the app opens goes to an endpoint of its upstream chosen by
// package balance, over mTLS that checks the endpoint's SPIFFE id
// (ClientTLS); a failed connect is retried on another endpoint. Then
// the bytes are spliced both ways until both sides end or the connection
// idles out.

// Defaults of an upstream that leaves its timeouts zero.
const (
	DefaultConnectTimeout = 5 * time.Second
	// maxConnectAttempts bounds the endpoints one connection tries.
	maxConnectAttempts = 3
)

// Names of the outbound components (Addr): the transparent listener, and
// an explicit upstream's listener with its namespace/service.
const outboundComponent = "outbound"

func upstreamComponent(u *pbproxy.Upstream) string {
	return "upstream " + u.GetNamespace() + "/" + u.GetService()
}

func init() {
	components = append(components, component{name: "outbound", run: runOutbound})
}

// outboundStats are the outbound side's metrics beside Stats.
type outboundStats struct {
	// ConnectFailures counts failed connects to an endpoint, by upstream
	// (namespace/service) and reason (dial, or a HandshakeError reason).
	connectFailures *prometheus.CounterVec
	// Ejections counts endpoints ejected, by upstream.
	ejections *prometheus.CounterVec
	// NoEndpoint counts app connections closed because no endpoint of
	// their upstream connected.
	noEndpoint *prometheus.CounterVec
	// Unknown counts transparent connections to an address of no
	// service, by what became of them (passthrough, deny).
	unknown *prometheus.CounterVec
}

func newOutboundStats(reg prometheus.Registerer) (*outboundStats, error) {
	s := &outboundStats{
		connectFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_upstream_connect_failures_total", Help: "Failed connects to an upstream's endpoint, by upstream and reason."}, []string{"upstream", "reason"}),
		ejections:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_upstream_ejections_total", Help: "Endpoints ejected after consecutive connect failures, by upstream."}, []string{"upstream"}),
		noEndpoint:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_upstream_no_endpoint_total", Help: "App connections closed because no endpoint of their upstream connected, by upstream."}, []string{"upstream"}),
		unknown:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "trellis_proxy_outbound_unknown_destination_total", Help: "Transparent connections to an address of no service, by action (passthrough, deny)."}, []string{"action"}),
	}
	for _, c := range []prometheus.Collector{s.connectFailures, s.ejections, s.noEndpoint, s.unknown} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// outbound is the running outbound component of one proxy.
type outbound struct {
	p     *Proxy
	stats *outboundStats

	// listeners are open by the address the snapshot names (an
	// upstream's bind_address, outbound.address).
	listeners map[string]*outboundListener

	mu        sync.Mutex
	balancers map[string]*balance.Balancer // by namespace/service
	table     *transparentTable
	own       []netip.AddrPort      // the listeners' addresses
	conns     map[net.Conn]struct{} // nil once closed
	wg        sync.WaitGroup
}

// outboundListener is one listener and what it serves: an explicit
// upstream (its bind address) or the transparent table.
type outboundListener struct {
	ln          net.Listener
	component   string
	transparent bool
}

func runOutbound(ctx context.Context, p *Proxy) error {
	stats, err := newOutboundStats(p.stats.Registry)
	if err != nil {
		return err
	}
	o := &outbound{p: p, stats: stats, listeners: map[string]*outboundListener{},
		balancers: map[string]*balance.Balancer{}, conns: map[net.Conn]struct{}{}}
	defer o.close()
	for {
		changed := p.changed()
		if st := p.state.Load(); st != nil {
			o.apply(ctx, st.snap)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// apply brings the listeners, balancers and transparent table in line
// with snap. A listener that cannot listen is logged and tried again at
// the next snapshot; /ready stays false meanwhile.
func (o *outbound) apply(ctx context.Context, snap *pbproxy.Snapshot) {
	now := o.p.cfg.Now()
	o.mu.Lock()
	seen := map[string]bool{}
	for _, u := range append(append([]*pbproxy.Upstream(nil), snap.GetUpstreams()...), snap.GetOutbound().GetDestinations()...) {
		key := u.GetNamespace() + "/" + u.GetService()
		if seen[key] {
			continue
		}
		seen[key] = true
		b := o.balancers[key]
		if b == nil {
			b, _ = balance.New(balance.DefaultConfig()) // a valid constant
			o.balancers[key] = b
		}
		policy, _ := balance.ParsePolicy(u.GetLoadBalancer()) // checked by compile
		addrs := make([]string, 0, len(u.GetEndpoints()))
		for _, e := range u.GetEndpoints() {
			addrs = append(addrs, e.GetAddress())
		}
		b.Update(now, policy, addrs)
	}
	for key := range o.balancers {
		if !seen[key] {
			delete(o.balancers, key)
		}
	}
	if out := snap.GetOutbound(); out != nil {
		if t, err := newTransparentTable(out); err != nil {
			o.p.log.Warn("proxy: transparent outbound table refused, keeping the previous one", "err", err)
		} else {
			o.table = t
		}
	} else {
		o.table = nil
	}
	o.mu.Unlock()

	want := map[string]*outboundListener{}
	for _, u := range snap.GetUpstreams() {
		want[u.GetBindAddress()] = &outboundListener{component: upstreamComponent(u)}
	}
	if out := snap.GetOutbound(); out != nil {
		want[out.GetAddress()] = &outboundListener{component: outboundComponent, transparent: true}
	}
	for addr, l := range o.listeners {
		if w, ok := want[addr]; !ok || w.component != l.component {
			l.ln.Close()
			o.p.setListening(l.component, nil)
			delete(o.listeners, addr)
		}
	}
	for addr, w := range want {
		if _, ok := o.listeners[addr]; ok {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			o.p.log.Warn("proxy: cannot listen", "component", w.component, "address", addr, "err", err)
			continue
		}
		w.ln = ln
		o.listeners[addr] = w
		o.p.setListening(w.component, ln.Addr())
		o.wg.Add(1)
		go o.accept(ctx, addr, w)
	}
	var own []netip.AddrPort
	for _, l := range o.listeners {
		if a, err := netip.ParseAddrPort(l.ln.Addr().String()); err == nil {
			own = append(own, a)
		}
	}
	o.mu.Lock()
	o.own = own
	o.mu.Unlock()
}

// close stops the listeners and the connections they carry, and waits
// for their goroutines.
func (o *outbound) close() {
	for _, l := range o.listeners {
		l.ln.Close()
		o.p.setListening(l.component, nil)
	}
	o.mu.Lock()
	for c := range o.conns {
		c.Close()
	}
	o.conns = nil
	o.mu.Unlock()
	o.wg.Wait()
}

func (o *outbound) track(c net.Conn) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conns == nil {
		return false
	}
	o.conns[c] = struct{}{}
	return true
}

func (o *outbound) untrack(c net.Conn) {
	o.mu.Lock()
	delete(o.conns, c)
	o.mu.Unlock()
}

func (o *outbound) accept(ctx context.Context, addr string, l *outboundListener) {
	defer o.wg.Done()
	label := addr
	if l.transparent {
		label = outboundComponent
	}
	for {
		c, err := l.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		o.p.stats.Connections.WithLabelValues(label).Inc()
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			o.p.stats.Active.WithLabelValues(label).Inc()
			defer o.p.stats.Active.WithLabelValues(label).Dec()
			if !o.track(c) {
				c.Close()
				return
			}
			defer o.untrack(c)
			if l.transparent {
				o.serveTransparent(ctx, c)
			} else {
				o.serveUpstream(ctx, c, addr)
			}
		}()
	}
}

// serveUpstream carries an app's connection to the explicit upstream
// bound at addr in the current snapshot.
func (o *outbound) serveUpstream(ctx context.Context, c net.Conn, addr string) {
	var up *pbproxy.Upstream
	if st := o.p.state.Load(); st != nil {
		for _, u := range st.snap.GetUpstreams() {
			if u.GetBindAddress() == addr {
				up = u
				break
			}
		}
	}
	if up == nil {
		c.Close()
		return
	}
	o.forward(ctx, c, up, addr)
}

// serveTransparent carries a redirected connection to the service its
// original destination belongs to, or per outbound.unknown.
func (o *outbound) serveTransparent(ctx context.Context, c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return
	}
	dst, err := redirect.OriginalDst(tc)
	if err != nil {
		o.p.log.Debug("proxy: transparent connection without an original destination", "err", err)
		o.stats.unknown.WithLabelValues(UnknownDeny).Inc()
		c.Close()
		return
	}
	o.mu.Lock()
	table := o.table
	o.mu.Unlock()
	if table == nil {
		c.Close()
		return
	}
	up, passthrough := table.route(dst)
	switch {
	case up != nil:
		o.forward(ctx, c, up, outboundComponent)
	case passthrough && !o.isOwnListener(dst):
		o.stats.unknown.WithLabelValues(UnknownPassthrough).Inc()
		o.passthrough(ctx, c, dst)
	default:
		o.stats.unknown.WithLabelValues(UnknownDeny).Inc()
		c.Close()
	}
}

// isOwnListener says whether dst is one of the proxy's outbound
// listeners: passing a connection through to it would loop.
func (o *outbound) isOwnListener(dst netip.AddrPort) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, a := range o.own {
		if a.Port() == dst.Port() && (a.Addr().IsUnspecified() || a.Addr().Unmap() == dst.Addr().Unmap()) {
			return true
		}
	}
	return false
}

// passthrough connects to dst directly, as the app meant to.
func (o *outbound) passthrough(ctx context.Context, c net.Conn, dst netip.AddrPort) {
	ctx, cancel := context.WithTimeout(ctx, DefaultConnectTimeout)
	s, err := (&net.Dialer{}).DialContext(ctx, "tcp", dst.String())
	cancel()
	if err != nil {
		c.Close()
		return
	}
	if !o.track(s) {
		s.Close()
		c.Close()
		return
	}
	defer o.untrack(s)
	splice(o.p.stats.halfCloser(c, outboundComponent), s, o.p.cfg.IdleTimeout)
}

// forward connects to an endpoint of up and splices c to it.
func (o *outbound) forward(ctx context.Context, c net.Conn, up *pbproxy.Upstream, label string) {
	key := up.GetNamespace() + "/" + up.GetService()
	o.mu.Lock()
	b := o.balancers[key]
	o.mu.Unlock()
	if b == nil {
		c.Close()
		return
	}
	s, ep, err := o.connect(ctx, up, b)
	if err != nil {
		o.p.log.Info("proxy: no endpoint of the upstream connected", "upstream", key, "err", err)
		o.stats.noEndpoint.WithLabelValues(key).Inc()
		c.Close()
		return
	}
	defer b.Closed(ep)
	if !o.track(s) {
		s.Close()
		c.Close()
		return
	}
	defer o.untrack(s)
	splice(o.p.stats.halfCloser(c, label), s, time.Duration(up.GetIdleTimeoutMs())*time.Millisecond)
}

// connect opens mTLS to an endpoint of up, trying another endpoint after
// a failure, at most maxConnectAttempts, and returns the connection and
// the endpoint's address. Each failure is reported to b, which may eject
// the endpoint.
func (o *outbound) connect(ctx context.Context, up *pbproxy.Upstream, b *balance.Balancer) (*tls.Conn, string, error) {
	key := up.GetNamespace() + "/" + up.GetService()
	timeout := time.Duration(up.GetConnectTimeoutMs()) * time.Millisecond
	if timeout == 0 {
		timeout = DefaultConnectTimeout
	}
	var tried []string
	var errs []error
	for range maxConnectAttempts {
		addr, ok := b.Pick(o.p.cfg.Now(), tried)
		if !ok {
			break
		}
		tried = append(tried, addr)
		conn, reason, err := o.dialEndpoint(ctx, addr, up.GetSpiffeId(), timeout)
		if err == nil {
			b.Connected(addr)
			return conn, addr, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		o.stats.connectFailures.WithLabelValues(key, reason).Inc()
		if b.Failed(o.p.cfg.Now(), addr) {
			o.stats.ejections.WithLabelValues(key).Inc()
			o.p.log.Warn("proxy: endpoint ejected after consecutive connect failures", "upstream", key, "endpoint", addr)
		}
		if ctx.Err() != nil {
			break
		}
	}
	if len(tried) == 0 {
		return nil, "", errors.New("no endpoints")
	}
	return nil, "", errors.Join(errs...)
}

// dialEndpoint connects to addr and completes the TLS handshake as a
// client that expects spiffeID, all within timeout. On failure, reason
// labels it: dial, or the handshake's refusal reason.
func (o *outbound) dialEndpoint(ctx context.Context, addr, spiffeID string, timeout time.Duration) (*tls.Conn, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, "dial", err
	}
	conn := tls.Client(raw, o.p.ClientTLS(spiffeID))
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		reason := reasonOf(err)
		o.p.stats.HandshakeFailures.WithLabelValues(outboundComponent, reason).Inc()
		return nil, reason, err
	}
	return conn, "", nil
}

// halfCloser counts c's bytes under listener and keeps its CloseWrite,
// which splice uses to pass an end of stream on.
func (s *Stats) halfCloser(c net.Conn, listener string) net.Conn {
	cc := s.counting(c, listener)
	if cw, ok := c.(closeWriter); ok {
		return struct {
			*countingConn
			closeWriter
		}{cc, cw}
	}
	return cc
}
