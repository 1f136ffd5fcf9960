package proxy

import (
	"bytes"
	"crypto/x509"
	"net"
	"sync"

	"google.golang.org/protobuf/proto"

	pbproxy "trellis.dev/trellis/api/proxy/v1"
	"trellis.dev/trellis/internal/mesh"
)

// The inbound connections established, each with its verified peer, so
// that a new snapshot closes those it no longer allows.

type trackedConn struct {
	conn  net.Conn
	peer  mesh.Service
	certs []*x509.Certificate
	// http says the connection carries HTTP (its requests are decided one
	// by one; the connection by the L4 decision with NoHTTP false).
	http bool
}

type connSet struct {
	mu sync.Mutex
	m  map[*trackedConn]struct{}
}

func (s *connSet) add(c *trackedConn) {
	s.mu.Lock()
	s.m[c] = struct{}{}
	s.mu.Unlock()
}

func (s *connSet) remove(c *trackedConn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

func (s *connSet) all() []*trackedConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*trackedConn, 0, len(s.m))
	for c := range s.m {
		out = append(out, c)
	}
	return out
}

// recheckConns closes the established inbound connections that st, just
// taken in place of prev, no longer allows: their peer's chain no longer
// reaches a root of st (a root pruned), or the intentions now deny it.
// When neither the roots nor the intentions changed (new endpoints of an
// upstream, a renewed leaf), there is nothing to check.
func (p *Proxy) recheckConns(prev, st *state) {
	sameRoots := prev != nil && sameTrust(prev.snap, st.snap)
	if sameRoots && proto.Equal(prev.snap.GetInbound(), st.snap.GetInbound()) {
		return
	}
	for _, c := range p.conns.all() {
		reason, ok := "", true
		if !sameRoots {
			if _, err := p.verifyPeer(st, c.certs, x509.ExtKeyUsageClientAuth); err != nil {
				reason, ok = err.Error(), false
			}
		}
		if ok {
			d := decideConn(st, c.peer, c.http)
			reason, ok = d.Reason, d.Allowed
		}
		if !ok {
			p.log.Info("proxy: closing an inbound connection the new snapshot no longer allows", "peer", c.peer.String(), "reason", reason)
			p.stats.ConnectionsClosedBySnapshot.Inc()
			c.conn.Close()
		}
	}
}

// allowedConn says whether st allows the established connection c.
func (p *Proxy) allowedConn(st *state, c *trackedConn) (string, bool) {
	if _, err := p.verifyPeer(st, c.certs, x509.ExtKeyUsageClientAuth); err != nil {
		return err.Error(), false
	}
	d := decideConn(st, c.peer, c.http)
	return d.Reason, d.Allowed
}

// sameTrust says whether two snapshots trust the same roots in the same
// trust domain.
func sameTrust(a, b *pbproxy.Snapshot) bool {
	if a.GetIdentity().GetTrustDomain() != b.GetIdentity().GetTrustDomain() {
		return false
	}
	ra, rb := a.GetCertificates().GetRootsPem(), b.GetCertificates().GetRootsPem()
	if len(ra) != len(rb) {
		return false
	}
	for i := range ra {
		if !bytes.Equal(ra[i], rb[i]) {
			return false
		}
	}
	return true
}

// decideConn is the L4 decision on a peer of st's inbound listener.
func decideConn(st *state, peer mesh.Service, http bool) mesh.Decision {
	return mesh.Decide(mesh.Request{Source: peer, Destination: st.self, NoHTTP: !http}, st.intentions, st.def)
}
