package server

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcMetrics count the gRPC server's calls per method and code, and time
// them. Label values are bounded: the method is one the server registered
// (anything else is counted as "unknown"), the code one of gRPC's 17. A
// stream's handling time is its lifetime, as a watch's is on the HTTP API.
type grpcMetrics struct {
	handled  *prometheus.CounterVec
	handling *prometheus.HistogramVec
	// known holds the registered methods' full names, set once the
	// services are registered (see register); nil until then.
	known atomic.Pointer[map[string]bool]
}

func newGRPCMetrics(reg prometheus.Registerer) (*grpcMetrics, error) {
	m := &grpcMetrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "trellis_grpc_server_handled_total",
			Help: "gRPC calls completed by the server, by service, method, type and status code.",
		}, []string{"grpc_service", "grpc_method", "grpc_type", "grpc_code"}),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "trellis_grpc_server_handling_seconds",
			Help:    "Time the server took to handle a gRPC call (a stream's is its lifetime), by service, method and type.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"grpc_service", "grpc_method", "grpc_type"}),
	}
	for _, c := range []prometheus.Collector{m.handled, m.handling} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// register records the methods the servers serve (the public and the
// server-to-server one). Call it once every service is registered, before
// serving.
func (m *grpcMetrics) register(srvs ...*grpc.Server) {
	known := map[string]bool{}
	for _, srv := range srvs {
		for svc, info := range srv.GetServiceInfo() {
			for _, meth := range info.Methods {
				known["/"+svc+"/"+meth.Name] = true
			}
		}
	}
	m.known.Store(&known)
}

// methodLabels splits a full method name ("/pkg.Service/Method") into the
// service and method labels; a name not among known (or malformed) is
// "unknown", so that no caller can add label values.
func methodLabels(fullMethod string, known map[string]bool) (service, method string) {
	if !known[fullMethod] {
		return "unknown", "unknown"
	}
	svc, meth, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if !ok || svc == "" || meth == "" {
		return "unknown", "unknown"
	}
	return svc, meth
}

// streamType is the grpc_type label of a stream, as gRPC's own metrics
// name the four kinds of call.
func streamType(info *grpc.StreamServerInfo) string {
	switch {
	case info.IsClientStream && info.IsServerStream:
		return "bidi_stream"
	case info.IsClientStream:
		return "client_stream"
	case info.IsServerStream:
		return "server_stream"
	}
	return "unary"
}

func (m *grpcMetrics) observe(fullMethod, typ string, start time.Time, err error) {
	var known map[string]bool
	if k := m.known.Load(); k != nil {
		known = *k
	}
	svc, meth := methodLabels(fullMethod, known)
	m.handled.WithLabelValues(svc, meth, typ, codeOf(err).String()).Inc()
	m.handling.WithLabelValues(svc, meth, typ).Observe(time.Since(start).Seconds())
}

// unary times a unary call; it runs outermost, so a panic turned into
// codes.Internal by the next interceptor is counted as such.
func (m *grpcMetrics) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.observe(info.FullMethod, "unary", start, err)
		return resp, err
	}
}

func (m *grpcMetrics) stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		m.observe(info.FullMethod, streamType(info), start, err)
		return err
	}
}

// codeOf is the code the client sees for a handler's error: gRPC sends a
// context error that is not a status as Canceled or DeadlineExceeded.
func codeOf(err error) codes.Code {
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return status.FromContextError(err).Code()
}
