package server

import (
	"errors"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/module"
)

// withFlags is cfg serving the default modules configured by the flags of
// `trellis server` args: a module's flags are checked by Validate too.
func withFlags(t *testing.T, cfg Config, args ...string) Config {
	t.Helper()
	cfg.Modules = DefaultModules()
	if err := module.ParseFlags(cfg.Modules, module.Server, args...); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestConfigValidate(t *testing.T) {
	raft := func(r RaftConfig) *RaftConfig { return &r }
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for valid; else the start of the message after "bad configuration: "
	}{
		{"defaults", Config{}, ""},
		{"port 0 everywhere", Config{HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", RaftAddr: "127.0.0.1:0", ServerAddr: "127.0.0.1:0"}, ""},
		{"all interfaces", Config{HTTPAddr: ":7700"}, ""},
		{"host name", Config{HTTPAddr: "localhost:7700"}, ""},
		{"IPv6", Config{HTTPAddr: "[::1]:7700"}, ""},
		{"no port", Config{HTTPAddr: "127.0.0.1"}, `-http-addr: "127.0.0.1" is not host:port (for example 127.0.0.1:7700)`},
		{"no gRPC port", Config{GRPCAddr: "127.0.0.1"}, `-grpc-addr: "127.0.0.1" is not host:port (for example 127.0.0.1:7701)`},
		{"no server port", Config{ServerAddr: "127.0.0.1"}, `-server-addr: "127.0.0.1" is not host:port (for example 127.0.0.1:7703)`},
		{"server port is the gRPC port", Config{GRPCAddr: "127.0.0.1:7703"}, `-server-addr: "127.0.0.1:7703" is also -grpc-addr`},
		{"no Raft port", Config{RaftAddr: "127.0.0.1"}, `-raft-addr: "127.0.0.1" is not host:port (for example 127.0.0.1:7702)`},
		{"port not a number", Config{GRPCAddr: "127.0.0.1:http"}, `-grpc-addr: "127.0.0.1:http": port "http"`},
		{"port out of range", Config{RaftAddr: "127.0.0.1:70000"}, `-raft-addr: "127.0.0.1:70000": port`},
		{"bad host", Config{HTTPAddr: "bad_host!:1"}, `-http-addr: "bad_host!:1": "bad_host!" is neither`},
		{"same port twice", Config{HTTPAddr: "127.0.0.1:9000", GRPCAddr: "127.0.0.1:9000"}, `-grpc-addr: "127.0.0.1:9000" is also -http-addr`},
		{"port clash through the wildcard", Config{HTTPAddr: ":9000", RaftAddr: "127.0.0.1:9000"}, `-raft-addr:`},
		{"datacenter", Config{Datacenter: "eu-west-1"}, ""},
		{"datacenter upper case", Config{Datacenter: "DC1"}, `-datacenter: "DC1" is not a datacenter name`},
		{"datacenter with a dot", Config{Datacenter: "dc.1"}, `-datacenter: "dc.1" is not a datacenter name`},
		{"a secondary", withFlags(t, Config{Datacenter: "dc2"}, "-primary-datacenter", "dc1", "-primary-address", "10.0.0.1:7703", "-primary-address", "p2.example:7703"), ""},
		{"primary named as itself", withFlags(t, Config{Datacenter: "dc1"}, "-primary-datacenter", "dc1"), ""},
		{"primary datacenter not a label", withFlags(t, Config{}, "-primary-datacenter", "DC_1"), `-primary-datacenter: "DC_1" is not a datacenter name`},
		{"secondary without an address", withFlags(t, Config{Datacenter: "dc2"}, "-primary-datacenter", "dc1"), `-primary-address: required: -primary-datacenter "dc1" makes this cluster ("dc2") a secondary`},
		{"address on a primary", withFlags(t, Config{}, "-primary-address", "10.0.0.1:7701"), `-primary-address: only a secondary datacenter takes it`},
		{"address on a primary named as itself", withFlags(t, Config{}, "-primary-datacenter", "dc1", "-primary-address", "10.0.0.1:7701"), `-primary-address: only a secondary`},
		{"primary address not host:port", withFlags(t, Config{Datacenter: "dc2"}, "-primary-datacenter", "dc1", "-primary-address", "10.0.0.1"), `-primary-address: "10.0.0.1" is not host:port (for example 127.0.0.1:7703)`},
		{"primary address without host", withFlags(t, Config{Datacenter: "dc2"}, "-primary-datacenter", "dc1", "-primary-address", ":7703"), `-primary-address: ":7703": give the host and server-to-server port (-server-addr) of a server of "dc1"`},
		{"primary address port 0", withFlags(t, Config{Datacenter: "dc2"}, "-primary-datacenter", "dc1", "-primary-address", "10.0.0.1:0"), `-primary-address: "10.0.0.1:0": give the host`},
		{"primary address twice", withFlags(t, Config{Datacenter: "dc2"}, "-primary-datacenter", "dc1", "-primary-address", "a:1", "-primary-address", "a:1"), `-primary-address: "a:1" given twice`},
		{"raft ok", Config{Raft: raft(RaftConfig{DataDir: "/d", BootstrapExpect: 3, RetryJoin: []string{"10.0.0.2:7703", "s3.example:7703"}})}, ""},
		{"raft joining", Config{Raft: raft(RaftConfig{DataDir: "/d", RetryJoin: []string{"10.0.0.2:7703"}})}, ""},
		{"raft without data dir", Config{Raft: raft(RaftConfig{BootstrapExpect: 1})}, "-data-dir: required"},
		{"raft on the wildcard", Config{RaftAddr: "0.0.0.0:7702", Raft: raft(RaftConfig{DataDir: "/d"})}, `-raft-addr: "0.0.0.0:7702": other servers dial`},
		{"negative bootstrap-expect", Config{Raft: raft(RaftConfig{DataDir: "/d", BootstrapExpect: -1})}, "-bootstrap-expect: -1"},
		{"bad retry-join", Config{Raft: raft(RaftConfig{DataDir: "/d", RetryJoin: []string{"10.0.0.2"}})}, `-retry-join: "10.0.0.2" is not host:port (for example 127.0.0.1:7703)`},
		{"retry-join without host", Config{Raft: raft(RaftConfig{DataDir: "/d", RetryJoin: []string{":7703"}})}, `-retry-join: ":7703": give the host and server-to-server port (-server-addr) of another server (for example 127.0.0.1:7703)`},
		{"retry-join twice", Config{Raft: raft(RaftConfig{DataDir: "/d", RetryJoin: []string{"a:1", "a:1"}})}, `-retry-join: "a:1" given twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), "bad configuration: "+tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

// Each flag's example is the default of the port it names: joins go to the
// server-to-server port, never the HTTP or public gRPC one.
func TestExampleAddr(t *testing.T) {
	for _, tc := range []struct{ field, want string }{
		{"-http-addr", "127.0.0.1:7700"},
		{"-grpc-addr", "127.0.0.1:7701"},
		{"-retry-join", "127.0.0.1:7703"},
		{"-server-addr", "127.0.0.1:7703"},
		{"-raft-addr", "127.0.0.1:7702"},
	} {
		if got := ExampleAddr(tc.field); got != tc.want {
			t.Errorf("ExampleAddr(%s) = %s, want %s", tc.field, got, tc.want)
		}
	}
}
