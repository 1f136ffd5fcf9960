package server

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Open doors.
//
// A server says what about how it runs lets a caller in unchecked, or
// lets what crosses the network be read: securityWarnings, a pure function
// of how the server is reached (exposure), gives one sentence per open
// door; the server logs each at WARN when it is built, and every
// /v1/health answer carries them under "warnings". None makes the server
// unhealthy: a cluster that has not set certificates or ACLs up yet must
// still run, but it must not be mistaken for a secured one.
//
// The plaintext HTTP API listens on loopback unless -http-addr names a
// wider address (its default, DefaultHTTPAddr, is loopback for trellis
// server and trellis dev alike); with TLS files, remote callers use
// -https-addr, and a wider -http-addr is the operator's explicit choice,
// which the warning names.

// WarnPlaintext is the warning of a Raft server without TLS files: anyone
// who reaches its server ports is taken for a server.
const WarnPlaintext = "INSECURE: servers talk to each other in plaintext: anyone who reaches the Raft and " +
	"server-to-server ports can join the cluster or write anything, unchecked. " +
	"Give every server -tls-ca-file, -tls-cert-file and -tls-key-file (see `trellis tls`, docs/cluster.md)"

// WarnNoACLs is the warning of a server that checks no caller's token,
// which is every server until ACLs exist.
const WarnNoACLs = "ACLs are not enforced: any caller who reaches the API may do anything. " +
	"Keep the HTTP and gRPC ports where only trusted callers reach them (docs/tls.md)"

// WarnSnapshotOpen is the warning of a Raft server without ACLs: its
// snapshot route hands the CA's private keys to whoever asks.
const WarnSnapshotOpen = "GET /v1/snapshot answers any caller who reaches the HTTP API with every resource, " +
	"the Connect CA's private keys included, and PUT /v1/snapshot replaces the whole state: " +
	"until ACLs are enforced, only operators may reach the HTTP API's ports (docs/cluster.md)"

// WarnDebugOpen is the warning of -enable-debug without ACLs.
const WarnDebugOpen = "-enable-debug: Go's profiles at /v1/debug/pprof/ answer any caller who reaches the HTTP API"

// exposure is how a server is reached, in plain values: what
// securityWarnings judges. exposureOf reads it from a Config.
type exposure struct {
	raft      bool // Raft and server-to-server ports listen
	serverTLS bool // ... over mutual TLS
	// tlsFiles: the operator gave -tls-* files (trellis dev's
	// certificates, made in memory, are not the operator's).
	tlsFiles bool
	httpAddr string // the HTTP API, always plaintext
	grpcAddr string // the public gRPC API
	grpcTLS  bool   // ... serves TLS
	acls     bool   // an authorizer checks every caller's token
	debug    bool   // Go's profiles are served
}

// exposureOf is how a server built from cfg (with its defaults) is reached.
func exposureOf(cfg Config) exposure {
	return exposure{
		raft:      cfg.Raft != nil,
		serverTLS: cfg.TLS != nil,
		tlsFiles:  cfg.TLS != nil && cfg.TLS.FromFiles(),
		httpAddr:  cfg.HTTPAddr,
		grpcAddr:  cfg.GRPCAddr,
		grpcTLS:   cfg.TLS != nil && !cfg.PublicPlaintext,
		acls:      cfg.Authorize != nil,
		debug:     cfg.EnableDebug,
	}
}

// securityWarnings names every open door of a server reached as e, most
// dangerous first.
func securityWarnings(e exposure) []string {
	var out []string
	if e.raft && !e.serverTLS {
		out = append(out, WarnPlaintext)
	}
	if !e.acls {
		out = append(out, WarnNoACLs)
		if e.raft {
			// An in-memory server has no snapshot to give (501).
			out = append(out, WarnSnapshotOpen)
		}
	}
	out = append(out, plaintextHTTPWarning(e))
	if !e.grpcTLS {
		out = append(out, plaintextGRPCWarning(e))
	}
	if e.debug && !e.acls {
		out = append(out, WarnDebugOpen)
	}
	return out
}

func plaintextHTTPWarning(e exposure) string {
	switch {
	case onLoopback(e.httpAddr):
		return fmt.Sprintf("the HTTP API on %s is plaintext, on loopback: only callers on this machine reach it", e.httpAddr)
	case e.tlsFiles:
		return fmt.Sprintf("the HTTP API on %s is plaintext and reachable beyond this machine, because -http-addr names that address: "+
			"requests, tokens and answers cross the network in clear. With TLS files it listens on loopback unless told otherwise; "+
			"serve remote callers on -https-addr", e.httpAddr)
	default:
		return fmt.Sprintf("the HTTP API on %s is plaintext and reachable beyond this machine: requests, tokens and answers cross "+
			"the network in clear. Give the -tls-* files and -https-addr, and keep -http-addr on loopback", e.httpAddr)
	}
}

func plaintextGRPCWarning(e exposure) string {
	if onLoopback(e.grpcAddr) {
		return fmt.Sprintf("the public gRPC API on %s is plaintext, on loopback: only agents and clients on this machine reach it", e.grpcAddr)
	}
	return fmt.Sprintf("the public gRPC API on %s is plaintext and reachable beyond this machine: agents' heartbeats, "+
		"their tasks and tokens cross the network in clear. Give the -tls-* files", e.grpcAddr)
}

// onLoopback reports whether a listen address (host:port) takes
// connections from this machine only: a loopback IP or localhost. An
// empty or unspecified host (every interface), another address or a
// name that may resolve to anything is not.
func onLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
