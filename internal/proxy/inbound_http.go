package proxy

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"trellis.dev/trellis/internal/mesh"
)

// The inbound listener's HTTP side, for http and grpc services: one
// http.Server fed the connections already handshaked and allowed,
// HTTP/1.1 ones wrapped (h1Conn), HTTP/2 ones (gRPC included, negotiated
// by ALPN) as their *tls.Conn, which the server serves over HTTP/2. Each
// request is decided by the intentions (403 when denied), given
// X-Forwarded-Client-Cert, and forwarded to the app: over HTTP/1.1 for an
// http service, over HTTP/2 without TLS for a grpc one.

// XFCCHeader carries the verified peer's certificate to the app, in
// Envoy's format.
const XFCCHeader = "X-Forwarded-Client-Cert"

// connInfo is what the handler knows of a request's connection.
type connInfo struct {
	peer   mesh.Service
	peerID string // its SPIFFE id
	hash   string // hex SHA-256 of its certificate
}

type connInfoKey struct{}

func certHash(der []byte) string {
	h := sha256.Sum256(der)
	return hex.EncodeToString(h[:])
}

// XFCC is the X-Forwarded-Client-Cert value for a peer of certificate
// hash and SPIFFE id peerID, seen by the proxy of SPIFFE id by.
func XFCC(by, hash, peerID string) string {
	return "By=" + by + ";Hash=" + hash + ";URI=" + peerID
}

type inboundHTTP struct {
	p     *Proxy
	srv   *http.Server
	conns *chanListener
	h2    sync.Map // *tls.Conn → *h2Conn, while served

	toHTTP *httputil.ReverseProxy // the app speaks HTTP/1.1
	toGRPC *httputil.ReverseProxy // the app speaks HTTP/2 without TLS
}

func newInboundHTTP(p *Proxy) *inboundHTTP {
	h := &inboundHTTP{p: p, conns: newChanListener()}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true) // on a *tls.Conn that negotiated h2
	h.srv = &http.Server{
		Handler:           h,
		Protocols:         &protocols,
		ReadHeaderTimeout: p.cfg.HeaderTimeout,
		IdleTimeout:       p.cfg.IdleTimeout, // HTTP/2's too
		// What it says of peers (a malformed HTTP/2 preface, say) is for
		// debugging: ProtocolErrors counts it.
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			switch c := c.(type) {
			case *h1Conn:
				return context.WithValue(ctx, connInfoKey{}, c.info)
			case *tls.Conn:
				if hc, ok := h.h2.Load(c); ok {
					return context.WithValue(ctx, connInfoKey{}, hc.(*h2Conn).info)
				}
			}
			return ctx
		},
		// The server calls it with an HTTP/2 connection too: Active once
		// its preface is read, Closed at its end.
		ConnState: func(c net.Conn, s http.ConnState) {
			switch c := c.(type) {
			case *h1Conn:
				c.setState(s)
			case *tls.Conn:
				if hc, ok := h.h2.Load(c); ok {
					hc.(*h2Conn).setState(s)
				}
			}
		},
	}
	dial := &net.Dialer{Timeout: appDialTimeout}
	h.toHTTP = h.reverse(&http.Transport{
		DialContext:         dial.DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     p.cfg.IdleTimeout,
	})
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	h.toGRPC = h.reverse(&http.Transport{
		DialContext:     dial.DialContext,
		Protocols:       &h2c,
		IdleConnTimeout: p.cfg.IdleTimeout,
	})
	return h
}

func (h *inboundHTTP) reverse(t http.RoundTripper) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Transport:     t,
		FlushInterval: -1,
		Rewrite: func(pr *httputil.ProxyRequest) {
			app := pr.In.Context().Value(appKey{}).(string)
			pr.SetURL(&url.URL{Scheme: "http", Host: app})
			pr.Out.Host = pr.In.Host
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			h.p.log.Warn("proxy: inbound: the app did not answer", "err", err)
			http.Error(w, "upstream app unreachable", http.StatusBadGateway)
		},
	}
}

type appKey struct{}

func (h *inboundHTTP) serve() {
	if err := h.srv.Serve(h.conns); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		h.p.log.Error("proxy: inbound: the HTTP server stopped", "err", err)
	}
}

// drain stops taking requests: HTTP/1.1 connections close once idle,
// HTTP/2 ones get GOAWAY and close once their streams end.
func (h *inboundHTTP) drain() {
	h.srv.SetKeepAlivesEnabled(false)
	go h.srv.Shutdown(context.Background())
}

func (h *inboundHTTP) close() {
	h.srv.Close()
	h.conns.Close()
}

// serveConn serves one inbound HTTP connection (tc over raw) until it
// ends.
func (h *inboundHTTP) serveConn(tc *tls.Conn, raw *countingConn, info connInfo) {
	p := h.p
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		c := &h2Conn{info: info, p: p, closed: make(chan struct{})}
		h.h2.Store(tc, c)
		defer h.h2.Delete(tc)
		// A client silent after the handshake is let go at the header
		// timeout, as an HTTP/1.1 one is.
		timer := time.AfterFunc(p.cfg.HeaderTimeout, func() {
			if c.phase.CompareAndSwap(prefaceAwaited, prefaceTimedOut) {
				p.stats.ProtocolErrors.WithLabelValues(inboundListener, ReasonHeaderTimeout).Inc()
				raw.Close()
			}
		})
		defer timer.Stop()
		if !h.conns.push(tc) {
			return
		}
		<-c.closed
		return
	}
	c := &h1Conn{Conn: tc, raw: raw, info: info, p: p, closed: make(chan struct{})}
	if !h.conns.push(c) {
		return
	}
	<-c.closed
}

// ServeHTTP decides one request and forwards it to the app.
func (h *inboundHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := h.p
	sw := &statusWriter{ResponseWriter: w}
	defer func() { p.stats.Requests.WithLabelValues(inboundListener, strconv.Itoa(sw.code())).Inc() }()
	info, _ := r.Context().Value(connInfoKey{}).(connInfo)
	st := p.state.Load()
	// The app gets the path decided on, decoded and normalized.
	if norm := NormalizePath(r.URL.Path); norm != r.URL.Path || r.URL.RawPath != "" {
		r.URL.Path, r.URL.RawPath = norm, ""
	}
	// The permissions see the Host header, which net/http keeps apart.
	header := make(map[string][]string, len(r.Header)+1)
	for k, v := range r.Header {
		header[k] = v
	}
	header["Host"] = []string{r.Host}
	d := mesh.Decide(mesh.Request{
		Source: info.peer, Destination: st.self,
		HTTP: &mesh.HTTPRequest{Path: r.URL.Path, Method: r.Method, Header: header},
	}, st.intentions, st.def)
	if !d.Allowed {
		p.stats.IntentionDenials.WithLabelValues(info.peer.String(), "l7").Inc()
		http.Error(sw, DenialText(d), http.StatusForbidden)
		return
	}
	r.Header.Set(XFCCHeader, XFCC(st.selfID, info.hash, info.peerID))
	in := st.snap.GetInbound()
	r = r.WithContext(context.WithValue(r.Context(), appKey{}, in.GetAppAddress()))
	if in.GetProtocol() == "grpc" {
		h.toGRPC.ServeHTTP(sw, r)
		return
	}
	h.toHTTP.ServeHTTP(sw, r)
}

// DenialText is the body of a 403: which intention denied the request.
func DenialText(d mesh.Decision) string {
	switch {
	case d.Rule == nil:
		return "denied by the default intention: no intention names the caller"
	case d.ByDefault:
		return fmt.Sprintf("denied by the default intention: no permission of the intention %s → %s matches", d.Rule.Source, d.Rule.Destination)
	case d.Rule.Permission >= 0:
		return fmt.Sprintf("denied by the intention %s → %s (permission %d)", d.Rule.Source, d.Rule.Destination, d.Rule.Permission)
	}
	return fmt.Sprintf("denied by the intention %s → %s", d.Rule.Source, d.Rule.Destination)
}

// statusWriter records the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// The phases of an inbound HTTP/2 connection.
const (
	prefaceAwaited int32 = iota
	prefaceRead
	prefaceTimedOut
	prefaceFailed
)

// h2Conn follows an inbound HTTP/2 connection served by the http.Server:
// one that ends before its preface is read (a malformed one, or none) is
// counted, and its end is said.
type h2Conn struct {
	info      connInfo
	p         *Proxy
	phase     atomic.Int32
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *h2Conn) setState(s http.ConnState) {
	switch s {
	case http.StateActive:
		c.phase.CompareAndSwap(prefaceAwaited, prefaceRead)
	case http.StateClosed:
		if c.phase.CompareAndSwap(prefaceAwaited, prefaceFailed) {
			c.p.stats.ProtocolErrors.WithLabelValues(inboundListener, ReasonHTTP2Preface).Inc()
			c.p.log.Debug("proxy: inbound: no HTTP/2 preface", "source", c.info.peer.String())
		}
		c.closeOnce.Do(func() { close(c.closed) })
	}
}

// h1Conn is an inbound HTTP/1.1 connection handed to the http.Server. It
// counts a read that times out while request headers are awaited (a
// slowloris client) and says when the server has closed it.
type h1Conn struct {
	net.Conn
	raw  *countingConn
	info connInfo
	p    *Proxy

	state      atomic.Int32 // http.ConnState
	readAtIdle atomic.Int64
	counted    atomic.Bool
	closeOnce  sync.Once
	closed     chan struct{}
}

func (c *h1Conn) setState(s http.ConnState) {
	if s == http.StateIdle {
		c.readAtIdle.Store(c.raw.read.Load())
	}
	c.state.Store(int32(s))
}

func (c *h1Conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		s := http.ConnState(c.state.Load())
		partial := c.raw.read.Load() > c.readAtIdle.Load()
		if (s == http.StateNew || s == http.StateIdle && partial) && c.counted.CompareAndSwap(false, true) {
			c.p.stats.ProtocolErrors.WithLabelValues(inboundListener, ReasonHeaderTimeout).Inc()
		}
	}
	return n, err
}

func (c *h1Conn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() { close(c.closed) })
	return err
}

// chanListener hands connections accepted elsewhere to an http.Server.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return chanAddr{} }

type chanAddr struct{}

func (chanAddr) Network() string { return "inbound" }
func (chanAddr) String() string  { return "inbound" }
