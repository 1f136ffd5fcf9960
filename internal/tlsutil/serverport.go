package tlsutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"

	"google.golang.org/grpc/credentials"
)

// ServerPort is the TLS of a server's server ports, Raft and the server
// RPCs, in both directions: a tls.Config for each connection, and its
// links (Links). Every connection is mutual TLS between servers of the
// cluster; which certificates they present is decided per connection:
//
//   - A dialing server asks for ConnectServerName (SNI) when it knows the
//     Connect CA's roots, and for ServerName otherwise. The server dialed
//     presents its Connect leaf to the first, when it has one, and its
//     certificate file to every other: a server that cannot check a
//     Connect leaf (one that has just joined and has no state yet) is
//     never shown one.
//   - The server dialed names in its certificate request the CAs it
//     knows (the cluster CA, every Connect root); the dialing server
//     presents its Connect leaf when that list holds an issuer of the
//     leaf's chain, and its certificate file otherwise.
//   - Both sides accept either kind from the other (verifyServerPeer),
//     from a server of this datacenter. The server RPCs' listener
//     (Credentials) also takes a server of another datacenter of the
//     federation presenting its certificate file (server.<dc>.<domain>
//     of the cluster CA): a secondary's leader asking the primary for its
//     roots and intermediate. It records who the peer is (ServerPeerFrom)
//     and the server serves such a peer only the methods meant for other
//     datacenters. Raft takes servers of this datacenter alone.
//
// So the first servers form Raft over their certificate files before any
// root exists, a new server joins over them, and every link moves to
// Connect leaves once both its ends hold one (the links are opened again
// then: checkConnectReady).
type ServerPort struct{ c *Configurator }

// ServerPort returns the TLS of this server's server ports; ErrNotServer
// unless c is a server's.
func (c *Configurator) ServerPort() (*ServerPort, error) {
	if !c.cfg.Server {
		return nil, ErrNotServer
	}
	return &ServerPort{c: c}, nil
}

// Incoming is the Raft listener's tls.Config: each connection gets its
// own (GetConfigForClient), which records its peer on the link it came
// in on. It takes servers of this datacenter only.
func (p *ServerPort) Incoming() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			return p.c.incomingServer(hello.Conn, ownDatacenter, nil), nil
		},
	}
}

// Outgoing is the tls.Config of one dial over raw (a Track'ed connection
// or nil), with the name to ask for and the certificate to present as
// they are now.
func (p *ServerPort) Outgoing(raw net.Conn) *tls.Config { return p.c.outgoingServer(raw) }

// Track tracks raw, a Raft connection accepted or dialed, as a link,
// closed when the server becomes ready to speak Connect: Raft dials
// again, and retries what was in flight.
func (p *ServerPort) Track(raw net.Conn) net.Conn { return p.c.links.track(raw, true) }

// Listener tracks every connection the server RPCs' listener ln accepts
// as a link. These are never closed here: a gRPC client sees a closed
// connection as a call of unknown outcome, so the gRPC server ends them
// gracefully at their maximum age instead (server.Config.ServerLinkMaxAge).
func (p *ServerPort) Listener(ln net.Listener) net.Listener {
	return trackingListener{Listener: ln, links: p.c.links}
}

// Dial dials addr over TCP and tracks the connection as a link of the
// server RPCs, for grpc.WithContextDialer.
func (p *ServerPort) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return p.c.links.dial(ctx, addr)
}

// Credentials are the gRPC transport credentials of the server RPCs,
// for the server and for the clients that dial it: a tls.Config per
// connection, as Incoming and Outgoing make them, except that the server
// also takes a server of another datacenter presenting its certificate
// file; the AuthInfo of each connection it accepts carries the server
// it verified (ServerPeerFrom).
func (p *ServerPort) Credentials() credentials.TransportCredentials {
	return perConnCredentials{
		server: func(raw net.Conn, seen *ServerPeer) *tls.Config {
			return p.c.incomingServer(raw, anyDatacenter, seen)
		},
		client: p.c.outgoingServer,
	}
}

// Links counts the live links by the certificate their peer presented.
func (p *ServerPort) Links() map[string]int { return p.c.links.Counts() }

// IncomingServerConfig is ServerPort().Incoming().
func (c *Configurator) IncomingServerConfig() (*tls.Config, error) {
	p, err := c.ServerPort()
	if err != nil {
		return nil, err
	}
	return p.Incoming(), nil
}

// OutgoingServerConfig is the tls.Config of one dial to another server's
// server port (ServerPort().Outgoing, untracked): it is made for the
// certificates and roots held now, so dial again with a new one.
func (c *Configurator) OutgoingServerConfig() (*tls.Config, error) {
	p, err := c.ServerPort()
	if err != nil {
		return nil, err
	}
	return p.Outgoing(nil), nil
}

// incomingServer is the tls.Config of one connection accepted on a
// server port over raw, from servers of scope; the peer it verified is
// written to seen when set.
func (c *Configurator) incomingServer(raw net.Conn, scope peerScope, seen *ServerPeer) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: c.certificateByName,
		// Any certificate is asked for and verified in VerifyConnection
		// against the CAs held now. ClientCAs only names them in the
		// request, so that the dialer picks a certificate this server can
		// check (RequireAnyClientCert does not verify against it).
		ClientAuth:       tls.RequireAnyClientCert,
		ClientCAs:        c.clientCAs(),
		VerifyConnection: c.verifyLink(raw, x509.ExtKeyUsageClientAuth, scope, seen),
	}
}

// outgoingServer is the tls.Config of one dial to a server port over
// raw.
func (c *Configurator) outgoingServer(raw net.Conn) *tls.Config {
	name := c.ServerName()
	if c.connect.Load() != nil {
		name = c.ConnectServerName()
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Sent as SNI: which certificate to serve. The check that matters
		// is in VerifyConnection.
		ServerName: name,
		GetClientCertificate: func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if cert := c.connectCertFor(cri.AcceptableCAs); cert != nil {
				return cert, nil
			}
			return c.getClientCertificate(cri)
		},
		// Servers are dialed by address, and a peer's address says nothing
		// of its role: VerifyConnection does the whole check, against the
		// CAs held now (see outgoing).
		InsecureSkipVerify: true,
		VerifyConnection:   c.verifyLink(raw, x509.ExtKeyUsageServerAuth, ownDatacenter, nil),
	}
}

// verifyLink is the VerifyConnection of one server-port link over raw,
// either end: the peer must be a server of scope, its certificate valid
// for usage (client auth for the dialer, server auth for the accepting
// side), and the link is recorded with the kind of certificate the peer
// presented; the peer is written to seen when set.
func (c *Configurator) verifyLink(raw net.Conn, usage x509.ExtKeyUsage, scope peerScope, seen *ServerPeer) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		p, err := c.verifyServerPeer(cs.PeerCertificates, usage, scope)
		if err != nil {
			return err
		}
		c.links.observe(raw, p.Kind)
		if seen != nil {
			*seen = p
		}
		return nil
	}
}

// perConnCredentials are gRPC transport credentials that make a
// tls.Config for each connection from the raw connection it runs over:
// gRPC's own (credentials.NewTLS) keep one config for every connection.
// The server's config writes the server it verified to seen, which the
// connection's AuthInfo then carries.
type perConnCredentials struct {
	server func(raw net.Conn, seen *ServerPeer) *tls.Config
	client func(raw net.Conn) *tls.Config
}

// ClientHandshake asks for the name the config chose (SNI): gRPC's own
// would ask for the address dialed, which says nothing of which
// certificate to serve.
func (p perConnCredentials) ClientHandshake(ctx context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg := p.client(raw)
	return credentials.NewTLS(cfg).ClientHandshake(ctx, cfg.ServerName, raw)
}

func (p perConnCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if p.server == nil {
		return nil, nil, errClientOnly
	}
	var seen ServerPeer
	conn, info, err := credentials.NewTLS(p.server(raw, &seen)).ServerHandshake(raw)
	if err != nil {
		return conn, info, err
	}
	if ti, ok := info.(credentials.TLSInfo); ok && seen.Datacenter != "" {
		info = serverAuthInfo{TLSInfo: ti, peer: seen}
	}
	return conn, info, nil
}

func (p perConnCredentials) Info() credentials.ProtocolInfo {
	return credentials.NewTLS(&tls.Config{}).Info()
}

func (p perConnCredentials) Clone() credentials.TransportCredentials { return p }

// OverrideServerName is deprecated in gRPC and unused: the name asked
// for is decided per connection.
func (p perConnCredentials) OverrideServerName(string) error { return nil }

// certificateByName is the certificate a server presents, on its public
// ports and its server ports alike: the
// Connect server leaf to a peer that asks for ConnectServerName (it follows
// the Connect roots and can check it) while that leaf is valid, and the
// file's (or dev's) certificate to any other.
func (c *Configurator) certificateByName(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello.ServerName == c.ConnectServerName() {
		if l := c.validServerLeaf(); l != nil {
			return l.cert, nil
		}
	}
	return c.getCertificate(hello)
}
