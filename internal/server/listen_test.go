package server_test

import (
	"context"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/server"
)

// A second server on the ports of a first names the first address it
// could not bind, in the order the flags and the banner list them: the
// HTTP API's when every port is taken, the gRPC one's when only that is.
func TestPortInUseNamesTheFirstAddressThatFailed(t *testing.T) {
	first, err := server.New(server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, stop := context.WithCancel(context.Background())
		stop()
		_ = first.Start(ctx) // closes its listeners
	})
	for _, tc := range []struct {
		name       string
		cfg        server.Config
		flag, addr string
	}{
		{"both taken", server.Config{HTTPAddr: first.HTTPAddr(), GRPCAddr: first.GRPCAddr()}, "-http-addr", first.HTTPAddr()},
		{"gRPC taken", server.Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: first.GRPCAddr()}, "-grpc-addr", first.GRPCAddr()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := server.New(tc.cfg)
			if err == nil {
				t.Fatal("a second server on the same ports started")
			}
			want := tc.flag + ": " + tc.addr + " is in use"
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q; want it to begin %q", err, want)
			}
		})
	}
}
