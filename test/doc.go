// Package test holds Trellis's multi-process tests: they build the trellis
// binary, start real servers and agents on loopback, and drive them through
// the CLI and the public HTTP API only, as a user or an outside check would,
// looking at the processes and containers they run from outside. The attack
// tests (trust_attack_test.go) speak the wire as an attacker would instead:
// gRPC and TLS on every port, with certificates they forge themselves.
package test
