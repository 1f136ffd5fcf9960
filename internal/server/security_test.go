package server

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/tlsutil"
)

const (
	loopHTTP = "the HTTP API on 127.0.0.1:7700 is plaintext, on loopback: only callers on this machine reach it"
	loopGRPC = "the public gRPC API on 127.0.0.1:7701 is plaintext, on loopback: only agents and clients on this machine reach it"
)

// Each open door has its warning, and a closed one none: the table walks
// each door open and shut, and the addresses on and off loopback.
func TestSecurityWarnings(t *testing.T) {
	// A Raft server with the operator's TLS files and ACLs, on the
	// default addresses: only the loopback HTTP port is plaintext.
	closed := exposure{raft: true, serverTLS: true, tlsFiles: true, httpAddr: DefaultHTTPAddr, grpcAddr: DefaultGRPCAddr, grpcTLS: true, acls: true}
	with := func(change func(*exposure)) exposure {
		e := closed
		change(&e)
		return e
	}
	for _, tc := range []struct {
		name string
		e    exposure
		want []string // exactly these, in this order
		says []string // and the one about HTTP says these
	}{
		{"everything closed that can be", closed, []string{loopHTTP}, nil},
		{"trellis dev in memory", exposure{httpAddr: DefaultHTTPAddr, grpcAddr: DefaultGRPCAddr},
			[]string{WarnNoACLs, loopHTTP, loopGRPC}, nil},
		{"trellis dev -data-dir: its own certificates on the server port, public ports plaintext",
			exposure{raft: true, serverTLS: true, httpAddr: DefaultHTTPAddr, grpcAddr: DefaultGRPCAddr},
			[]string{WarnNoACLs, WarnSnapshotOpen, loopHTTP, loopGRPC}, nil},
		{"trellis server without TLS files or ACLs", exposure{raft: true, httpAddr: DefaultHTTPAddr, grpcAddr: DefaultGRPCAddr},
			[]string{WarnPlaintext, WarnNoACLs, WarnSnapshotOpen, loopHTTP, loopGRPC}, nil},
		{"trellis server with TLS files, without ACLs", with(func(e *exposure) { e.acls = false }),
			[]string{WarnNoACLs, WarnSnapshotOpen, loopHTTP}, nil},
		{"ACLs on, server links in plaintext", with(func(e *exposure) { e.serverTLS, e.tlsFiles, e.grpcTLS = false, false, false }),
			[]string{WarnPlaintext, loopHTTP, loopGRPC}, nil},
		{"debug without ACLs", with(func(e *exposure) { e.acls, e.debug = false, true }),
			[]string{WarnNoACLs, WarnSnapshotOpen, loopHTTP, WarnDebugOpen}, nil},
		{"debug with ACLs", with(func(e *exposure) { e.debug = true }), []string{loopHTTP}, nil},
		{"TLS files and a wider -http-addr the operator named",
			with(func(e *exposure) { e.httpAddr = "0.0.0.0:7700" }),
			nil, []string{"the HTTP API on 0.0.0.0:7700 is plaintext and reachable beyond this machine, because -http-addr names that address", "-https-addr"}},
		{"no TLS files and a wider -http-addr",
			with(func(e *exposure) {
				e.serverTLS, e.tlsFiles, e.grpcTLS, e.httpAddr = false, false, false, "10.0.0.1:7700"
			}),
			nil, []string{"the HTTP API on 10.0.0.1:7700 is plaintext and reachable beyond this machine", "Give the -tls-* files"}},
		{"a plaintext gRPC port on every interface",
			exposure{httpAddr: DefaultHTTPAddr, grpcAddr: ":7701", acls: true},
			[]string{loopHTTP, "the public gRPC API on :7701 is plaintext and reachable beyond this machine: agents' heartbeats, their tasks and tokens cross the network in clear. Give the -tls-* files"}, nil},
	} {
		got := securityWarnings(tc.e)
		if tc.want != nil && !slices.Equal(got, tc.want) {
			t.Errorf("%s: securityWarnings =\n%q\nwant\n%q", tc.name, got, tc.want)
		}
		for _, s := range tc.says {
			if !slices.ContainsFunc(got, func(w string) bool { return strings.Contains(w, s) }) {
				t.Errorf("%s: no warning says %q: %q", tc.name, s, got)
			}
		}
	}
}

// exposureOf reads a Config the way the server runs it.
func TestExposureOf(t *testing.T) {
	b, err := tlsutil.NewDevBundle("", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := tlsutil.NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	allow := func(context.Context) (acl.Authorizer, error) { return acl.AllowAll{}, nil }
	raft := &RaftConfig{DataDir: "/d", BootstrapExpect: 1}
	for _, tc := range []struct {
		name string
		cfg  Config
		want exposure
	}{
		{"defaults", Config{}, exposure{httpAddr: DefaultHTTPAddr, grpcAddr: DefaultGRPCAddr}},
		{"trellis dev -data-dir", Config{Raft: raft, TLS: bundle, PublicPlaintext: true},
			exposure{raft: true, serverTLS: true, httpAddr: DefaultHTTPAddr, grpcAddr: DefaultGRPCAddr}},
		{"TLS on every port, ACLs, debug", Config{Raft: raft, TLS: bundle, Authorize: allow, EnableDebug: true, HTTPAddr: "10.0.0.1:7700"},
			exposure{raft: true, serverTLS: true, grpcTLS: true, acls: true, debug: true, httpAddr: "10.0.0.1:7700", grpcAddr: DefaultGRPCAddr}},
	} {
		if got := exposureOf(tc.cfg.withDefaults()); got != tc.want {
			t.Errorf("%s: exposureOf = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestOnLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7700": true, "127.9.9.9:0": true, "[::1]:7700": true, "localhost:7700": true, "LocalHost:1": true,
		":7700": false, "0.0.0.0:7700": false, "[::]:7700": false, "10.0.0.1:7700": false,
		"trellis.example.com:7700": false, "127.0.0.1": false, "": false,
	} {
		if got := onLoopback(addr); got != want {
			t.Errorf("onLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// Both commands' -http-addr default, DefaultHTTPAddr, is loopback: with
// TLS files, the plaintext HTTP port is wider only when named.
func TestDefaultHTTPAddrIsLoopback(t *testing.T) {
	if !onLoopback(DefaultHTTPAddr) || !onLoopback(DefaultGRPCAddr) {
		t.Errorf("DefaultHTTPAddr %s, DefaultGRPCAddr %s: want both on loopback", DefaultHTTPAddr, DefaultGRPCAddr)
	}
}
