package main

import (
	"strings"
	"testing"

	"trellis.dev/trellis/internal/tlsutil"
)

func TestLeaveTarget(t *testing.T) {
	for _, tt := range []struct {
		name                       string
		socket, dataDir, addr, env string
		files                      tlsutil.Config
		want, wantErr              string
	}{
		{name: "the default", want: "/var/lib/trellis/agent/agent.sock"},
		{name: "the env", env: "/tmp/dev-1/agent.sock", want: "/tmp/dev-1/agent.sock"},
		{name: "-socket wins over the env", socket: "/s.sock", env: "/e.sock", want: "/s.sock"},
		{name: "-data-dir", dataDir: "/srv/agent", env: "/e.sock", want: "/srv/agent/agent.sock"},
		{name: "both", socket: "/s.sock", dataDir: "/srv/agent", wantErr: "give -socket or -data-dir, not both"},
		{name: "TLS files without -control-addr", files: tlsutil.Config{CAFile: "ca.pem"}, wantErr: "go with -control-addr"},
		{name: "-control-addr and a socket", addr: "10.0.0.7:7711", socket: "/s.sock", wantErr: "not both"},
		{name: "-control-addr without TLS", addr: "10.0.0.7:7711", wantErr: "-control-addr: needs -tls-ca-file, -tls-cert-file and -tls-key-file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TRELLIS_AGENT_SOCKET", tt.env)
			got, err := leaveTarget(tt.socket, tt.dataDir, tt.addr, tt.files)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("leaveTarget = %v, %v; want an error naming %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Socket != tt.want {
				t.Fatalf("leaveTarget = %+v, %v; want the socket %s", got, err, tt.want)
			}
		})
	}
}
