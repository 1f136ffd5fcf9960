package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMethodLabels(t *testing.T) {
	known := map[string]bool{
		"/trellis.resource.v1.ResourceService/Write": true,
		"/bad": true,
	}
	for _, tc := range []struct {
		full, svc, meth string
	}{
		{"/trellis.resource.v1.ResourceService/Write", "trellis.resource.v1.ResourceService", "Write"},
		{"/trellis.resource.v1.ResourceService/Made-Up", "unknown", "unknown"}, // not registered
		{"/bad", "unknown", "unknown"}, // registered yet malformed
		{"", "unknown", "unknown"},
	} {
		svc, meth := methodLabels(tc.full, known)
		if svc != tc.svc || meth != tc.meth {
			t.Errorf("methodLabels(%q) = %q, %q; want %q, %q", tc.full, svc, meth, tc.svc, tc.meth)
		}
	}
	if svc, meth := methodLabels("/trellis.resource.v1.ResourceService/Write", nil); svc != "unknown" || meth != "unknown" {
		t.Errorf("before the services are known: %q, %q; want unknown", svc, meth)
	}
}

func TestStreamType(t *testing.T) {
	for _, tc := range []struct {
		client, server bool
		want           string
	}{
		{false, false, "unary"},
		{false, true, "server_stream"},
		{true, false, "client_stream"},
		{true, true, "bidi_stream"},
	} {
		if got := streamType(&grpc.StreamServerInfo{IsClientStream: tc.client, IsServerStream: tc.server}); got != tc.want {
			t.Errorf("client=%v server=%v: %q, want %q", tc.client, tc.server, got, tc.want)
		}
	}
}

func TestCodeOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want codes.Code
	}{
		{nil, codes.OK},
		{status.Error(codes.NotFound, "x"), codes.NotFound},
		{fmt.Errorf("wrapped: %w", context.Canceled), codes.Canceled},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{errors.New("plain"), codes.Unknown},
	} {
		if got := codeOf(tc.err); got != tc.want {
			t.Errorf("codeOf(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
