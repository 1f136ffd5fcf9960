package raft

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	hraft "github.com/hashicorp/raft"
)

// TLS secures the Raft transport: every connection between two servers'
// Raft ports is mutual TLS. Incoming serves this server's certificate and
// requires a server certificate of the cluster from the dialer; Outgoing
// presents it and requires one from the server dialed (tlsutil's
// IncomingServerConfig and OutgoingServerConfig).
type TLS struct {
	Incoming, Outgoing *tls.Config
}

// tlsStreamLayer is hashicorp/raft's StreamLayer over TLS: the listener
// wraps each accepted connection in tls.Server, and Dial completes the
// handshake within the transport's timeout before raft writes to it.
// hashicorp/raft stays unaware of TLS: its NetworkTransport only ever sees
// net.Conns.
type tlsStreamLayer struct {
	ln        net.Listener // a tls.NewListener
	advertise net.Addr
	dial      *tls.Config
}

// newTLSStreamLayer listens on bindAddr. advertise, when set, is the
// address other servers dial; otherwise the listener's, which must then
// name a host (not 0.0.0.0).
func newTLSStreamLayer(bindAddr string, advertise net.Addr, t *TLS) (*tlsStreamLayer, error) {
	if t.Incoming == nil || t.Outgoing == nil {
		return nil, errors.New("raft TLS needs both an incoming and an outgoing configuration")
	}
	ln, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, err
	}
	s := &tlsStreamLayer{ln: tls.NewListener(ln, t.Incoming), advertise: advertise, dial: t.Outgoing}
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok || addr.IP == nil || addr.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("%q is not an address other servers can dial; give RaftAdvertiseAddr", s.Addr())
	}
	return s, nil
}

// Accept returns the next connection; its handshake happens on the first
// read, in the goroutine raft serves it from, so that one slow or hostile
// peer cannot hold up the others. A peer without a server certificate of
// the cluster fails that handshake and is dropped.
func (s *tlsStreamLayer) Accept() (net.Conn, error) { return s.ln.Accept() }

func (s *tlsStreamLayer) Close() error { return s.ln.Close() }

func (s *tlsStreamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.ln.Addr()
}

// Dial connects and handshakes within timeout, the same bound raft puts
// on a plain TCP dial.
func (s *tlsStreamLayer) Dial(address hraft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(d, "tcp", string(address), s.dial)
}
