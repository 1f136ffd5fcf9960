package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	miekg "github.com/miekg/dns"
)

// DefaultAddr is where the DNS interface listens by default, UDP and TCP
// (Consul's port, on loopback).
const DefaultAddr = "127.0.0.1:8600"

// Server serves Answer over UDP and TCP on one address: the DNS interface
// of a server or an agent. Start binds and serves until its context ends.
type Server struct {
	addr string
	cat  Catalog
	ttl  uint32
	log  *slog.Logger

	rotate atomic.Uint32
	cache  replyCache
	ready  chan struct{}
	bound  atomic.Pointer[net.UDPAddr]

	mu     sync.Mutex
	pc     net.PacketConn // bound by Listen, served by Start
	ln     net.Listener
	served bool // Start has them: it closes them
}

// Config says where a Server listens and what it answers from.
type Config struct {
	// Addr is host:port, UDP and TCP; port 0 picks one (the same for
	// both), which Addr tells once the server is Ready.
	Addr string
	// Catalog is what it answers from.
	Catalog Catalog
	// TTL of every answer (0 by default).
	TTL    uint32
	Logger *slog.Logger // discards when nil
}

// CheckAddr checks a -dns-addr value: a host:port whose host is an IP
// address (a DNS server is reached by address) and whose port is a
// number, 0 to 65535. flag names it in the error.
func CheckAddr(flag, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %q is not host:port (for example %s)", flag, addr, DefaultAddr)
	}
	if host != "" && net.ParseIP(host) == nil {
		return fmt.Errorf("%s: %q: the host must be an IP address (for example %s)", flag, addr, DefaultAddr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p > 65535 {
		return fmt.Errorf("%s: %q: the port must be a number from 0 to 65535", flag, addr)
	}
	return nil
}

// NewServer returns a server of cfg; it listens once started.
func NewServer(cfg Config) (*Server, error) {
	if err := CheckAddr("addr", cfg.Addr); err != nil {
		return nil, err
	}
	if cfg.Catalog == nil {
		return nil, errors.New("dns: catalog: missing")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{addr: cfg.Addr, cat: cfg.Catalog, ttl: cfg.TTL, log: log, ready: make(chan struct{})}, nil
}

// Ready is closed once the server listens.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addr is the address the server listens on, UDP and TCP; "" before it is
// Ready.
func (s *Server) Addr() string {
	if a := s.bound.Load(); a != nil {
		return a.String()
	}
	return ""
}

// Listen binds the address, UDP and TCP, before Start serves it: for a
// process that must fail at once when the address is taken. Start calls
// it when nobody has.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pc != nil {
		return nil
	}
	pc, ln, err := listen(s.addr)
	if err != nil {
		return err
	}
	s.pc, s.ln = pc, ln
	s.bound.Store(pc.LocalAddr().(*net.UDPAddr))
	return nil
}

// Close releases what Listen bound when Start will never serve it (the
// process that built the server failed before starting it); once Start
// has been called it does nothing, as Start closes them when it ends.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.served || s.pc == nil {
		return nil
	}
	err := errors.Join(s.pc.Close(), s.ln.Close())
	s.pc, s.ln = nil, nil
	return err
}

// Start listens on the address, UDP and TCP (unless Listen has), and
// serves until ctx ends, then returns nil. It fails when it cannot listen
// (the address in use).
func (s *Server) Start(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	pc, ln := s.pc, s.ln
	s.served = true
	s.mu.Unlock()
	h := miekg.HandlerFunc(s.serve)
	servers := []*miekg.Server{
		{PacketConn: pc, Handler: h, UDPSize: 65535},
		{Listener: ln, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }},
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(servers))
	var cause error
	for _, srv := range servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- srv.ActivateAndServe()
		}()
		select {
		case <-started:
		case cause = <-errs:
		}
		if cause != nil {
			break
		}
	}
	if cause == nil {
		close(s.ready)
		s.log.Info("DNS interface listening", "addr", s.Addr(), "udp", true, "tcp", true)
		select {
		case <-ctx.Done():
		case cause = <-errs:
		}
	}
	for _, srv := range servers {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.ShutdownContext(sctx)
		cancel()
	}
	pc.Close()
	ln.Close()
	wg.Wait()
	if cause == nil {
		return nil
	}
	return fmt.Errorf("dns: %w", cause)
}

// listen binds addr's TCP port, then the same UDP port: with port 0 the
// one TCP picked, tried again a few times when UDP has it taken.
func listen(addr string) (net.PacketConn, net.Listener, error) {
	for try := 0; ; try++ {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, nil, listenErr(addr, "tcp", err)
		}
		pc, err := net.ListenPacket("udp", ln.Addr().String())
		if err == nil {
			return pc, ln, nil
		}
		ln.Close()
		if _, port, _ := net.SplitHostPort(addr); port != "0" || try == 4 {
			return nil, nil, listenErr(addr, "udp", err)
		}
	}
}

// listenErr words a failure to listen; a port in use with what most
// often holds it: Consul's DNS has the same default port.
func listenErr(addr, network string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%s (%s) is in use (a Consul agent, another trellis dev or server? give -dns-addr another port, or -dns-addr \"\" for none): %w", addr, network, err)
	}
	return fmt.Errorf("dns: listen on %s (%s): %w", addr, network, err)
}

// packBuffers hold the replies as they are packed, one per query being
// answered.
var packBuffers = sync.Pool{New: func() any { b := make([]byte, 0, miekg.MaxMsgSize); return &b }}

// serve answers one query, truncated to what its transport carries: over
// UDP the client's EDNS0 size (at most MaxUDPSize; 512 bytes without
// EDNS0), with TC set when records were left out, so that the client asks
// again over TCP.
func (s *Server) serve(w miekg.ResponseWriter, req *miekg.Msg) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("DNS answer panicked", "question", req.Question, "panic", p)
			m := new(miekg.Msg)
			m.SetRcode(req, miekg.RcodeServerFailure)
			_ = w.WriteMsg(m)
		}
	}()
	size := miekg.MaxMsgSize
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size = miekg.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = min(max(int(opt.UDPSize()), miekg.MinMsgSize), MaxUDPSize)
		}
	}
	rotation := int(s.rotate.Add(1) % rotations)
	bp := packBuffers.Get().(*[]byte)
	defer packBuffers.Put(bp)

	// A repeated question of an unchanged catalog is answered with the
	// reply packed before (Answer is a function of the query, the
	// catalog and the rotation alone).
	rc, cacheable := s.cat.(Revisioned)
	var rev uint64
	key, keyed := keyOf(req, size, rotation)
	cacheable = cacheable && keyed
	if cacheable {
		rev = rc.Revision()
		if wire, ok := s.cache.get(rev, key, req.Id, *bp); ok {
			s.write(w, wire)
			return
		}
	}
	reply := Answer(req, s.cat, Options{TTL: s.ttl, Rotate: uint32(rotation)})
	// Pack once; only a reply that does not fit is truncated (which
	// measures it again, record by record) and packed again.
	wire, err := reply.PackBuffer(*bp)
	if err == nil && len(wire) > size {
		reply.Truncate(size)
		wire, err = reply.PackBuffer(*bp)
	}
	if err != nil {
		s.log.Error("DNS reply does not pack", "question", req.Question, "err", err)
		m := new(miekg.Msg)
		m.SetRcode(req, miekg.RcodeServerFailure)
		_ = w.WriteMsg(m)
		return
	}
	// Kept only when the catalog did not move while it was answered, and
	// never a SERVFAIL (a catalog not synced yet).
	if cacheable && reply.Rcode != miekg.RcodeServerFailure && rc.Revision() == rev {
		s.cache.put(rev, key, wire)
	}
	s.write(w, wire)
}

func (s *Server) write(w miekg.ResponseWriter, wire []byte) {
	if _, err := w.Write(wire); err != nil {
		s.log.Debug("DNS reply not sent", "to", w.RemoteAddr(), "err", err)
	}
}
