// Package test holds Trellis's multi-process tests: they build the trellis
// binary, start real servers on loopback, and drive them through the public
// HTTP API only, as a user or an outside check would.
package test
