package camodule

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/ca"
)

// PrimaryCA is what a secondary datacenter's CA manager needs of the
// primary's: its roots, and its signature on an intermediate.
type PrimaryCA interface {
	Roots(ctx context.Context) ([]*pbca.CARoot, error)
	SignIntermediate(ctx context.Context, csrPEM []byte, datacenter string) (Intermediate, error)
}

// primaryCallTimeout bounds one call to one server of the primary, so
// that a server that accepts connections and never answers costs one
// timeout before the next address is tried.
const primaryCallTimeout = 10 * time.Second

// PrimaryClient is PrimaryCA over the server-to-server port of the
// primary's servers (their -server-addr): CAFederation's Roots and
// SignIntermediate, served there only, to servers presenting their server
// certificate. It tries the addresses in turn, starting at the last that
// answered, and moves on from an address that cannot be reached; an
// address that answers with a refusal ends the call with it.
type PrimaryClient struct {
	addrs []string
	creds credentials.TransportCredentials

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
	first int // the index of the address that answered last
}

// NewPrimaryClient returns the PrimaryCA of the primary's servers at
// addrs (their server-to-server addresses), dialled with creds (a
// server's module.Deps.DialServersOf: its server certificate over TLS),
// or in plaintext when creds is nil. Connections are made at the first
// call; Start closes them.
func NewPrimaryClient(addrs []string, creds credentials.TransportCredentials) *PrimaryClient {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return &PrimaryClient{addrs: addrs, creds: creds, conns: map[string]*grpc.ClientConn{}}
}

// Start closes the connections when ctx ends: the client lives as long
// as the server.
func (p *PrimaryClient) Start(ctx context.Context) error {
	<-ctx.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	for a, c := range p.conns {
		_ = c.Close()
		delete(p.conns, a)
	}
	return nil
}

func (p *PrimaryClient) conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(p.creds))
	if err != nil {
		return nil, err
	}
	p.conns[addr] = c
	return c, nil
}

// each calls call on the addresses in turn until one answers.
func (p *PrimaryClient) each(ctx context.Context, call func(ctx context.Context, addr string, c *grpc.ClientConn) error) error {
	p.mu.Lock()
	first := p.first
	p.mu.Unlock()
	var errs []error
	for i := range p.addrs {
		n := (first + i) % len(p.addrs)
		addr := p.addrs[n]
		c, err := p.conn(addr)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, primaryCallTimeout)
			err = call(cctx, addr, c)
			cancel()
		}
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			if err == nil {
				p.mu.Lock()
				p.first = n
				p.mu.Unlock()
			}
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return fmt.Errorf("no server of the primary answered: %w", errors.Join(errs...))
}

// unreachable tells an address that could not be reached (try the next)
// from one that answered.
func unreachable(err error) bool {
	var np notPrimaryError
	if errors.As(err, &np) {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown:
		return true
	}
	return false
}

// notPrimaryError is an answer that shows the address is not a server of
// the primary.
type notPrimaryError struct{ err error }

func (e notPrimaryError) Error() string { return ca.ErrNotPrimary.Error() + ": " + e.err.Error() }
func (e notPrimaryError) Unwrap() []error {
	return []error{ca.ErrNotPrimary, e.err}
}

// classify turns an answer that shows addr is not a Trellis server into a
// notPrimaryError, and leaves other errors as they are.
func classify(addr string, err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	case status.Code(err) == codes.Unimplemented:
		return notPrimaryError{fmt.Errorf("%s answers gRPC but does not serve the CA's federation (%v): -primary-address is the server-to-server address (-server-addr) of a server of the primary, not its public gRPC address", addr, err)}
	case status.Code(err) == codes.PermissionDenied:
		return notPrimaryError{fmt.Errorf("%s refused this server: %s", addr, status.Convert(err).Message())}
	case strings.Contains(msg, "error reading server preface") && (strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset by peer")):
		// A TLS server closes on a plaintext client's first bytes: a
		// FIN, or a reset when those bytes were left unread.
		return fmt.Errorf("%w (%s closed the connection before gRPC began: the primary's servers serve TLS on their server ports, so this server needs its -tls-* files, a server certificate of the same cluster CA)", err, addr)
	case strings.Contains(msg, "server preface") || strings.Contains(msg, "http2: frame too large") || strings.Contains(msg, "first record does not look like a TLS handshake"):
		return notPrimaryError{fmt.Errorf("%s answers, but not as a gRPC server (%v): -primary-address is the server-to-server address (-server-addr) of a server of the primary, not its HTTP address", addr, err)}
	}
	return err
}

// Roots lists the primary's roots.
func (p *PrimaryClient) Roots(ctx context.Context) ([]*pbca.CARoot, error) {
	var out []*pbca.CARoot
	err := p.each(ctx, func(ctx context.Context, addr string, c *grpc.ClientConn) error {
		resp, err := pbca.NewCAFederationClient(c).Roots(ctx, &pbca.FederationRootsRequest{})
		if status.Code(err) == codes.FailedPrecondition {
			return notPrimaryError{fmt.Errorf("%s: %v", addr, status.Convert(err).Message())}
		}
		if err != nil {
			return classify(addr, err)
		}
		out = resp.GetRoots()
		return nil
	})
	return out, err
}

// SignIntermediate has the primary sign the intermediate of datacenter. A
// FailedPrecondition (a server of a secondary, or of a CA that cannot
// sign another) shows the address is not a primary's.
func (p *PrimaryClient) SignIntermediate(ctx context.Context, csrPEM []byte, datacenter string) (Intermediate, error) {
	var out Intermediate
	err := p.each(ctx, func(ctx context.Context, addr string, c *grpc.ClientConn) error {
		resp, err := pbca.NewCAFederationClient(c).SignIntermediate(ctx, &pbca.SignIntermediateRequest{CsrPem: string(csrPEM), Datacenter: datacenter})
		if status.Code(err) == codes.FailedPrecondition {
			return notPrimaryError{fmt.Errorf("%s: %v", addr, status.Convert(err).Message())}
		}
		if err != nil {
			return classify(addr, err)
		}
		out = Intermediate{CertPEM: resp.GetCertPem(), ChainPEM: resp.GetChainPem()}
		return nil
	})
	return out, err
}
