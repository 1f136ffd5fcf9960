package server_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/server"
	"trellis.dev/trellis/internal/testlog"
)

// The start log and /v1/health name the same open doors: a server in
// memory, as trellis dev runs it, with its HTTP API on every interface
// and -enable-debug.
func TestStartLogAndHealthNameTheOpenDoors(t *testing.T) {
	logs := &testlog.Buffer{}
	srv, err := server.New(server.Config{
		HTTPAddr: "0.0.0.0:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:7702", EnableDebug: true,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	runServer(t, srv)
	base := "http://127.0.0.1:" + srv.HTTPAddr()[strings.LastIndex(srv.HTTPAddr(), ":")+1:]
	waitHealthy(t, base)
	resp, err := http.Get(base + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h wire.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	if len(h.Warnings) != 4 || h.Warnings[0] != server.WarnNoACLs || h.Warnings[3] != server.WarnDebugOpen ||
		!strings.Contains(h.Warnings[1], "is plaintext and reachable beyond this machine") ||
		!strings.Contains(h.Warnings[2], "the public gRPC API on "+srv.GRPCAddr()+" is plaintext, on loopback") {
		t.Errorf("health warnings = %q; want ACLs off, the HTTP API beyond this machine, the gRPC API on loopback, debug", h.Warnings)
	}
	for _, w := range h.Warnings {
		if !strings.Contains(logs.String(), "level=WARN msg="+strconv.Quote(w)) {
			t.Errorf("the start log does not say %q:\n%s", w, logs)
		}
	}
}
