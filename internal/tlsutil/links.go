package tlsutil

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
)

// Links are the live connections of a server's server ports (Raft and
// the server RPCs, both directions), each tracked under its TLS, with the
// kind of certificate its peer presented. TLS never looks at the
// certificates of a connection that is up, so when the server becomes
// ready to speak Connect (checkConnectReady) its Raft links, opened with
// the certificate files, are closed, and Raft opens them again with
// Connect leaves (it retries what was in flight); the server RPCs' links
// are left to the gRPC server, which ends each gracefully at its maximum
// age. Counts tells an operator, and a test, which certificates the links
// run on.
type Links struct {
	mu    sync.Mutex
	conns map[*link]struct{}
}

func newLinks() *Links { return &Links{conns: map[*link]struct{}{}} }

// link is a raw connection under TLS, tracked until it is closed.
type link struct {
	net.Conn
	owner *Links
	// peer is the kind of certificate the peer presented (PeerConnect,
	// PeerClusterCA); "" until the handshake has verified it.
	peer atomic.Value
	once sync.Once
	// closeOnReady: closed when the server becomes ready to speak
	// Connect (a Raft link).
	closeOnReady bool
}

func (l *link) Close() error {
	l.once.Do(func() {
		l.owner.mu.Lock()
		delete(l.owner.conns, l)
		l.owner.mu.Unlock()
	})
	return l.Conn.Close()
}

// track wraps raw so that it is counted until closed, and closed when
// the server becomes ready to speak Connect if closeOnReady.
func (ls *Links) track(raw net.Conn, closeOnReady bool) net.Conn {
	l := &link{Conn: raw, owner: ls, closeOnReady: closeOnReady}
	l.peer.Store("")
	ls.mu.Lock()
	ls.conns[l] = struct{}{}
	ls.mu.Unlock()
	return l
}

// observe records the kind of certificate the peer of raw presented,
// when raw is a tracked link.
func (ls *Links) observe(raw net.Conn, kind string) {
	if l, ok := raw.(*link); ok && l.owner == ls {
		l.peer.Store(kind)
	}
}

// closeOnReady closes every live link that is closed when the server
// becomes ready to speak Connect, and says how many.
func (ls *Links) closeOnReady() int {
	ls.mu.Lock()
	all := make([]*link, 0, len(ls.conns))
	for l := range ls.conns {
		if l.closeOnReady {
			all = append(all, l)
		}
	}
	ls.mu.Unlock()
	for _, l := range all {
		_ = l.Close()
	}
	return len(all)
}

// LinkHandshaking counts the links whose peer has not been verified yet.
const LinkHandshaking = "handshaking"

// Counts are the live links by the kind of certificate their peer
// presented: PeerConnect, PeerClusterCA, or LinkHandshaking.
func (ls *Links) Counts() map[string]int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := map[string]int{}
	for l := range ls.conns {
		kind := l.peer.Load().(string)
		if kind == "" {
			kind = LinkHandshaking
		}
		out[kind]++
	}
	return out
}

// trackingListener tracks every connection it accepts.
type trackingListener struct {
	net.Listener
	links *Links
}

func (t trackingListener) Accept() (net.Conn, error) {
	c, err := t.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return t.links.track(c, false), nil
}

// dial dials addr over TCP and tracks the connection.
func (ls *Links) dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return ls.track(c, false), nil
}
