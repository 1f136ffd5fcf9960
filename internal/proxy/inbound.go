package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"trellis.dev/trellis/internal/mesh"
)

// The inbound listener: where other proxies connect to this task's
// service. Each connection is TLS 1.3 with the proxy's leaf, the peer's
// certificate verified (ServerTLS), then decided by the intentions on the
// peer's service and namespace: a denied connection is closed at once. A
// tcp service's connections are then spliced to the app; an http or grpc
// service's are served as HTTP (inbound_http.go), each request decided
// again.

const inboundListener = "inbound"

func init() { components = append(components, component{name: inboundListener, run: runInbound}) }

// runInbound listens on the snapshot's inbound address until ctx ends.
// A proxy whose snapshot has no inbound listener waits for one that has.
func runInbound(ctx context.Context, p *Proxy) error {
	var addr string
	for {
		if in := p.state.Load().snap.GetInbound(); in != nil {
			addr = in.GetAddress()
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.changed():
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	p.setListening(inboundListener, ln.Addr())
	h := newInboundHTTP(p)
	go h.serve()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	quit, drainDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drainDone)
		select {
		case <-p.draining:
			p.setListening(inboundListener, nil)
			ln.Close()
			h.drain()
		case <-quit:
		}
	}()
	var wg sync.WaitGroup
	defer func() {
		close(quit)
		<-drainDone
		p.setListening(inboundListener, nil)
		ln.Close()
		h.close()
		for _, c := range p.conns.all() {
			c.conn.Close()
		}
		wg.Wait()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if p.Draining() {
				// The connections established finish; what is left when
				// ctx ends is closed.
				<-ctx.Done()
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.serveInbound(ctx, c, h)
		}()
	}
}

// tlsRecordHandshake is the first byte of every TLS connection.
const tlsRecordHandshake = 0x16

// serveInbound serves one inbound connection until it ends.
func (p *Proxy) serveInbound(ctx context.Context, raw net.Conn, h *inboundHTTP) {
	p.stats.Connections.WithLabelValues(inboundListener).Inc()
	active := p.stats.Active.WithLabelValues(inboundListener)
	active.Inc()
	defer active.Dec()
	cc := p.stats.counting(raw, inboundListener)
	defer cc.Close()

	cc.SetDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
	br := bufio.NewReaderSize(cc, 512)
	first, err := br.Peek(1)
	if err != nil {
		p.stats.HandshakeFailures.WithLabelValues(inboundListener, reasonOf(err)).Inc()
		return
	}
	if first[0] != tlsRecordHandshake {
		p.stats.HandshakeFailures.WithLabelValues(inboundListener, ReasonPlaintext).Inc()
		p.log.Debug("proxy: inbound: plaintext refused", "remote", raw.RemoteAddr().String())
		return
	}
	tc := tls.Server(&bufferedConn{Conn: cc, r: br}, p.ServerTLS())
	if err := tc.HandshakeContext(ctx); err != nil {
		p.stats.HandshakeFailures.WithLabelValues(inboundListener, reasonOf(err)).Inc()
		p.log.Debug("proxy: inbound: handshake refused", "remote", raw.RemoteAddr().String(), "err", err)
		return
	}
	cc.SetDeadline(time.Time{})

	cs := tc.ConnectionState()
	st := p.state.Load()
	id, err := serviceIDOf(st, cs.PeerCertificates[0])
	if err != nil { // verified at the handshake; a snapshot swapped since may disagree
		p.stats.HandshakeFailures.WithLabelValues(inboundListener, reasonOf(err)).Inc()
		return
	}
	peer := mesh.Service{Namespace: id.Namespace, Name: id.Service}
	isHTTP := mesh.SpeaksHTTP(st.snap.GetInbound().GetProtocol())
	if d := decideConn(st, peer, isHTTP); !d.Allowed {
		p.stats.IntentionDenials.WithLabelValues(peer.String(), "l4").Inc()
		p.log.Info("proxy: inbound: connection denied", "source", peer.String(), "reason", d.Reason)
		return
	}
	tracked := &trackedConn{conn: cc, peer: peer, certs: cs.PeerCertificates, http: isHTTP}
	p.conns.add(tracked)
	defer p.conns.remove(tracked)
	// A snapshot taken between the decision and the tracking: decide
	// again with it.
	if cur := p.state.Load(); cur != st {
		if _, ok := p.allowedConn(cur, tracked); !ok {
			p.stats.IntentionDenials.WithLabelValues(peer.String(), "l4").Inc()
			return
		}
	}
	if isHTTP {
		h.serveConn(tc, cc, connInfo{peer: peer, peerID: id.String(), hash: certHash(cs.PeerCertificates[0].Raw)})
		return
	}
	p.spliceToApp(tc, st.snap.GetInbound().GetAppAddress())
}

// appDialTimeout bounds connecting to the app on loopback.
const appDialTimeout = 5 * time.Second

// spliceToApp copies between an inbound connection and a new connection
// to the app until both directions end.
func (p *Proxy) spliceToApp(tc *tls.Conn, appAddr string) {
	app, err := net.DialTimeout("tcp", appAddr, appDialTimeout)
	if err != nil {
		p.log.Warn("proxy: inbound: the app does not answer", "app", appAddr, "err", err)
		return
	}
	defer app.Close()
	done := make(chan struct{}, 2)
	// A direction that ends cleanly is half-closed; one that fails (the
	// connection closed under it) ends both.
	go func() {
		if _, err := io.Copy(app, tc); err != nil {
			app.Close()
			tc.Close()
		} else if tcp, ok := app.(*net.TCPConn); ok {
			tcp.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		if _, err := io.Copy(tc, app); err != nil {
			app.Close()
			tc.Close()
		} else {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// bufferedConn reads through a bufio.Reader that has peeked at the
// connection's first bytes.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
