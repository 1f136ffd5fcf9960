package raft

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	hraft "github.com/hashicorp/raft"
)

// TLS secures the Raft transport: every connection between two servers'
// Raft ports is mutual TLS (tlsutil's ServerPort). Incoming serves this
// server's certificate and requires a server's from the dialer; Outgoing
// makes the config of one dial over a raw connection, presenting this
// server's certificate and requiring a server's from the server dialed:
// called at each dial, so that which certificates are asked for and
// presented can change between dials. Track, when set, is given every raw
// connection, accepted or dialed, before TLS, and returns the one to use
// (the server tracks its links with it).
type TLS struct {
	Incoming *tls.Config
	Outgoing func(raw net.Conn) *tls.Config
	Track    func(raw net.Conn) net.Conn
}

// tlsStreamLayer is hashicorp/raft's StreamLayer over TLS: the listener
// wraps each accepted connection in tls.Server, and Dial completes the
// handshake within the transport's timeout before raft writes to it.
// hashicorp/raft stays unaware of TLS: its NetworkTransport only ever sees
// net.Conns.
type tlsStreamLayer struct {
	ln        net.Listener // a tls.NewListener
	advertise net.Addr
	dial      func(raw net.Conn) *tls.Config
	track     func(raw net.Conn) net.Conn
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
	track := t.Track
	if track == nil {
		track = func(c net.Conn) net.Conn { return c }
	}
	s := &tlsStreamLayer{ln: tls.NewListener(trackingListener{ln, track}, t.Incoming), advertise: advertise, dial: t.Outgoing, track: track}
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
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, err
	}
	raw = s.track(raw)
	conn := tls.Client(raw, s.dial(raw))
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// trackingListener hands every connection it accepts to track.
type trackingListener struct {
	net.Listener
	track func(net.Conn) net.Conn
}

func (t trackingListener) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return t.track(c), nil
}
