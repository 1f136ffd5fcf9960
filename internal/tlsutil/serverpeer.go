package tlsutil

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Who is at the other end of a server port. Raft takes servers of this
// datacenter alone; the server RPCs also take a server of another
// datacenter of the federation, on its certificate file, and tell the
// server which datacenter each caller is a server of (ServerPeerFrom), so
// that it serves another datacenter's servers only what is meant for them
// (a secondary's leader asking the primary for its intermediate).

// ServerPeer is the server at the other end of a server-port connection,
// as its certificate proved it.
type ServerPeer struct {
	// Datacenter is the datacenter the peer is a server of.
	Datacenter string
	// Kind is the kind of certificate it presented: PeerClusterCA or
	// PeerConnect.
	Kind string
}

// peerScope is which servers a server-port connection takes.
type peerScope int

const (
	// ownDatacenter: servers of this datacenter only (Raft, and every
	// link a server dials to its own cluster).
	ownDatacenter peerScope = iota
	// anyDatacenter: servers of any datacenter of the federation, those
	// of another on a server certificate of the cluster CA alone (the
	// server RPCs' listener).
	anyDatacenter
)

// serverAuthInfo is the gRPC AuthInfo of a connection the server RPCs'
// listener accepted over TLS: TLS's own, and the server it verified.
type serverAuthInfo struct {
	credentials.TLSInfo
	peer ServerPeer
}

// ServerPeerFrom returns the server that called, on a gRPC call that came
// in over the TLS of a server port (ServerPort.Credentials); false for a
// call over any other transport, plaintext included.
func ServerPeerFrom(ctx context.Context) (ServerPeer, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ServerPeer{}, false
	}
	ai, ok := p.AuthInfo.(serverAuthInfo)
	return ai.peer, ok
}

// otherServerDatacenter is the datacenter other than own whose server
// name (server.<dc>.<domain>) a certificate's DNS names hold: "" when
// they hold none, an error when they hold the names of several (a
// certificate that passes for a server of two datacenters says nothing
// of which one its holder is).
func otherServerDatacenter(dnsNames []string, own, domain string) (string, error) {
	var found []string
	for _, n := range dnsNames {
		rest, ok := strings.CutPrefix(n, "server.")
		if !ok {
			continue
		}
		dc, ok := strings.CutSuffix(rest, "."+domain)
		if !ok || dc == own || checkLabel(dc) != nil || slices.Contains(found, dc) {
			continue
		}
		found = append(found, dc)
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("the certificate names the servers of several datacenters (%s): a server's names one", strings.Join(found, ", "))
}

// DialServersOf is the TLS of a dial to the server RPCs of a server of
// datacenter dc, another datacenter of the federation (a secondary's
// leader asking the primary): it presents this server's certificate file
// (server.<this dc>.<domain> of the cluster CA), never a Connect leaf,
// which the other datacenter could not place, and accepts only a server
// certificate of the cluster CA naming server.<dc>.<domain>.
func (c *Configurator) DialServersOf(dc string) credentials.TransportCredentials {
	// The name is sent as SNI too: the server dialed presents its
	// certificate file for any name but its Connect one.
	return perConnCredentials{client: func(net.Conn) *tls.Config { return c.outgoingTo(ServerName(dc, c.cfg.Domain)) }}
}
