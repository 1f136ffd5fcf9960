package leaves

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/agent/failover"
	"trellis.dev/trellis/internal/backoff"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/storage"
)

// RetryAfterKey is the trailer of a ResourceExhausted answer of Sign that
// holds the seconds to wait (camodule.RetryAfterKey).
const RetryAfterKey = "retry-after"

// Servers is the cache's link to the servers over their public gRPC port:
// Sign (CAService.Sign) and WatchRoots (a watch of the CARoot resources).
// While the agent's session is on a server (Ride), it goes over the
// session's connection, so that the agent has one link to the servers and
// one failover, the session's. Before the session's first connection
// (with auto-encrypt the agent needs its leaf before it joins) and between
// two, it dials one server at a time itself and moves to the next of the
// list when one is unreachable.
type Servers struct {
	servers Failover
	opts    []grpc.DialOption
	log     *slog.Logger

	mu     sync.Mutex
	cc     *grpc.ClientConn // its own connection, nil while riding
	ccAddr string           // the server cc is to
	// riding is the session's connection while the session is on a
	// server (Ride), nil otherwise.
	riding grpc.ClientConnInterface
}

// Failover is the failover over the servers a link follows
// (failover.Servers): the server to use now, and moving on from one.
type Failover interface {
	Current() string
	Leave(addr string) string
}

// NewServers dials addrs (gRPC host:port, tried in turn) with opts (the
// transport credentials, the token).
func NewServers(addrs []string, log *slog.Logger, opts ...grpc.DialOption) *Servers {
	return NewServersOn(failover.New(addrs), log, opts...)
}

// NewServersOn dials the server that servers, a failover shared with the
// agent's session, names, with opts.
func NewServersOn(servers Failover, log *slog.Logger, opts ...grpc.DialOption) *Servers {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Servers{servers: servers, opts: opts, log: log}
}

// Ride makes cc, the session's connection to the server it is on, the
// link until ctx ends (the session leaves that server): the link's own
// connection is closed, and the watch of the roots on it opened again on
// cc. cc must send the token and use the credentials the link would.
func (s *Servers) Ride(ctx context.Context, cc grpc.ClientConnInterface) {
	s.mu.Lock()
	s.riding = cc
	if s.cc != nil {
		s.cc.Close()
		s.cc = nil
	}
	s.mu.Unlock()
	<-ctx.Done()
	s.mu.Lock()
	if s.riding == cc {
		s.riding = nil
	}
	s.mu.Unlock()
}

// conn is the connection to the current server: the session's while it
// rides it, else its own.
func (s *Servers) conn() (grpc.ClientConnInterface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.riding != nil {
		return s.riding, nil
	}
	addr := s.servers.Current()
	if addr == "" {
		return nil, errors.New("no server address")
	}
	if s.cc != nil && s.ccAddr == addr {
		return s.cc, nil
	}
	if s.cc != nil {
		// The session moved on from that server meanwhile.
		s.cc.Close()
		s.cc = nil
	}
	cc, err := grpc.NewClient(addr, s.opts...)
	if err != nil {
		return nil, err
	}
	s.cc, s.ccAddr = cc, addr
	return cc, nil
}

// failed moves to the next server when cc, its own connection, failed in
// a way another server may not. The session's connection is the
// session's to leave.
func (s *Servers) failed(cc grpc.ClientConnInterface, err error) {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Unknown:
	default:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cc == nil || grpc.ClientConnInterface(s.cc) != cc {
		return
	}
	s.cc.Close()
	s.cc = nil
	s.servers.Leave(s.ccAddr)
}

// Close closes its own connection.
func (s *Servers) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cc != nil {
		s.cc.Close()
		s.cc = nil
	}
}

// Riding says whether the link goes over the session's connection now
// and holds no connection of its own.
func (s *Servers) Riding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.riding != nil && s.cc == nil
}

// Sign has a server sign csrPEM. Over the server's limit the error is a
// *RateLimitedError with the retry-after the server sent.
func (s *Servers) Sign(ctx context.Context, csrPEM string) (certPEM, chainPEM string, err error) {
	cc, err := s.conn()
	if err != nil {
		return "", "", err
	}
	var trailer metadata.MD
	resp, err := pbca.NewCAServiceClient(cc).Sign(ctx, &pbca.SignRequest{CsrPem: csrPEM}, grpc.Trailer(&trailer))
	if err != nil {
		if status.Code(err) == codes.ResourceExhausted {
			wait := time.Second
			if v := trailer.Get(RetryAfterKey); len(v) > 0 {
				if n, perr := strconv.Atoi(v[0]); perr == nil && n >= 0 {
					wait = time.Duration(n) * time.Second
				}
			}
			return "", "", &RateLimitedError{RetryAfter: wait, Err: err}
		}
		s.failed(cc, err)
		return "", "", err
	}
	return resp.GetCertPem(), resp.GetChainPem(), nil
}

// WatchRoots follows the CA's roots until ctx ends, calling set with them
// after the first full listing and after every change. A broken watch is
// opened again (on the next server when this one is gone) after a backoff
// of ca.SignRetryMin to ca.SignRetryMax, as a failed signature is.
func (s *Servers) WatchRoots(ctx context.Context, set func(Roots)) {
	_ = resource.NewWatchedSet(resource.WatchedSetConfig{
		Source: s,
		Type:   ca.RootType,
		Changed: func(byName map[string]*pbresource.Resource) error {
			r, err := rootsOf(byName)
			if err != nil {
				return err
			}
			set(r)
			return nil
		},
		Retry:  backoff.Policy{Base: ca.SignRetryMin, Max: ca.SignRetryMax},
		Rand:   mrand.Float64,
		Logger: s.log,
	}).Start(ctx)
}

// Watch opens a WatchList stream on the current server (resource.Watcher).
// A stream that fails in a way another server may not moves the link to
// the next server.
func (s *Servers) Watch(ctx context.Context, req *pbresource.WatchListRequest) (storage.Watch, error) {
	cc, err := s.conn()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := pbresource.NewResourceServiceClient(cc).WatchList(ctx, req)
	if err != nil {
		cancel()
		s.failed(cc, err)
		return nil, err
	}
	return &serverWatch{stream: stream, cancel: cancel, failed: func(err error) { s.failed(cc, err) }}, nil
}

// serverWatch is a WatchList stream of a server as a storage.Watch.
type serverWatch struct {
	stream grpc.ServerStreamingClient[pbresource.WatchEvent]
	cancel context.CancelFunc
	failed func(error)
}

// Next returns the stream's next event. The stream lives on the context
// Watch was given; a ctx of Next's own that ends first ends the stream.
func (w *serverWatch) Next(ctx context.Context) (*pbresource.WatchEvent, error) {
	defer context.AfterFunc(ctx, w.cancel)()
	ev, err := w.stream.Recv()
	if err != nil {
		w.failed(err)
		return nil, err
	}
	return ev, nil
}

func (w *serverWatch) Close() { w.cancel() }

// rootsOf turns the stored roots into Roots.
func rootsOf(byName map[string]*pbresource.Resource) (Roots, error) {
	var out Roots
	for _, res := range byName {
		root, err := resource.DecodeData[*pbca.CARoot](res)
		if err != nil {
			return Roots{}, fmt.Errorf("a root the servers sent: %w", err)
		}
		certs, err := ca.ParseCerts([]byte(root.GetRootCert()))
		if err != nil {
			return Roots{}, fmt.Errorf("root %s: %w", root.GetId(), err)
		}
		out.Certs = append(out.Certs, certs[0])
		out.Stored = append(out.Stored, root)
		if root.GetActive() {
			out.ActiveID, out.TrustDomain, out.Active = root.GetId(), root.GetTrustDomain(), certs[0]
		} else if out.TrustDomain == "" {
			out.TrustDomain = root.GetTrustDomain()
		}
	}
	return out, nil
}

// Token returns the dial options that send the ACL token with every
// call (resource.TokenMetadataKey).
func Token(token string) []grpc.DialOption {
	if token == "" {
		return nil
	}
	add := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, resource.TokenMetadataKey, token)
	}
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(add(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(add(ctx), desc, cc, method, opts...)
		}),
	}
}
