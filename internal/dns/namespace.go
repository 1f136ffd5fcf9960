package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	miekg "github.com/miekg/dns"

	"trellis.dev/trellis/internal/netns"
)

// NamespaceListener is the DNS interface in one network namespace (a
// bridge task's), as ServeNamespace started it.
type NamespaceListener struct {
	addr    netip.AddrPort
	servers []*miekg.Server
	wg      sync.WaitGroup
	once    sync.Once
}

// Addr is the address it listens on in the namespace, UDP and TCP.
func (l *NamespaceListener) Addr() netip.AddrPort { return l.addr }

// Close stops it and closes its sockets.
func (l *NamespaceListener) Close() error {
	l.once.Do(func() {
		for _, srv := range l.servers {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = srv.ShutdownContext(ctx)
			cancel()
		}
		l.wg.Wait()
	})
	return nil
}

// ServeNamespace listens, UDP and TCP, on 127.0.0.1:port inside the
// network namespace at path (port 0: one the kernel picks), and answers
// there as the server does, but for one difference: a name outside
// trellis. is forwarded to recursors from the server's own namespace (the
// host's), its reply passed back as is, and SERVFAIL when none answers.
// With no recursors it is REFUSED, as on the server's address.
func (s *Server) ServeNamespace(path string, port int, recursors []netip.AddrPort) (*NamespaceListener, error) {
	var pc net.PacketConn
	var ln net.Listener
	err := netns.Do(path, func() error {
		var err error
		pc, ln, err = listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		return err
	})
	if err != nil {
		return nil, err
	}
	l := &NamespaceListener{addr: pc.LocalAddr().(*net.UDPAddr).AddrPort()}
	h := miekg.HandlerFunc(func(w miekg.ResponseWriter, req *miekg.Msg) {
		if len(req.Question) != 1 || InZone(req.Question[0].Name) || len(recursors) == 0 {
			s.serve(w, req)
			return
		}
		s.forward(w, req, recursors)
	})
	l.servers = []*miekg.Server{
		{PacketConn: pc, Handler: h, UDPSize: 65535},
		{Listener: ln, Handler: h, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }},
	}
	for _, srv := range l.servers {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		errs := make(chan error, 1)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			errs <- srv.ActivateAndServe()
		}()
		select {
		case <-started:
		case err := <-errs:
			l.Close()
			pc.Close()
			ln.Close()
			return nil, fmt.Errorf("dns: serve in %s: %w", path, err)
		}
	}
	return l, nil
}

// forward answers req with the recursors' reply, or SERVFAIL.
func (s *Server) forward(w miekg.ResponseWriter, req *miekg.Msg, recursors []netip.AddrPort) {
	network := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(recursors))*forwardTimeout)
	defer cancel()
	reply, err := forward(ctx, recursors, network, req)
	if err != nil {
		s.log.Debug("DNS query not forwarded", "question", req.Question, "err", err)
		reply = new(miekg.Msg)
		reply.SetRcode(req, miekg.RcodeServerFailure)
	}
	if err := w.WriteMsg(reply); err != nil {
		s.log.Debug("DNS reply not sent", "to", w.RemoteAddr(), "err", err)
	}
}
