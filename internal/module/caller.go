package module

import "context"

// ServerCaller is who called a method of a server service (Parts.
// ServerServices), as the server-to-server port's TLS proved it. The
// server puts it in the context of every call of that port, before the
// method runs.
type ServerCaller struct {
	// Datacenter is the datacenter the caller is a server of; "" when
	// the port is plaintext (a server without TLS files), which proves
	// nothing of the caller.
	Datacenter string
}

// Plaintext reports whether the call came over a plaintext port.
func (c ServerCaller) Plaintext() bool { return c.Datacenter == "" }

type serverCallerKey struct{}

// WithServerCaller returns ctx carrying c: the server's, for each call of
// its server-to-server port.
func WithServerCaller(ctx context.Context, c ServerCaller) context.Context {
	return context.WithValue(ctx, serverCallerKey{}, c)
}

// ServerCallerFrom returns the caller of a server service's method; false
// when ctx is not a call of the server-to-server port, which a method
// that decides by its caller refuses.
func ServerCallerFrom(ctx context.Context) (ServerCaller, bool) {
	c, ok := ctx.Value(serverCallerKey{}).(ServerCaller)
	return c, ok
}
