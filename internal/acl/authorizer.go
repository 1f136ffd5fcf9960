package acl

import "errors"

// ErrPermissionDenied is wrapped by every authorization refusal: an
// Authorizer's methods return it (wrapped, with their reason) to refuse.
// HTTP answers it with 403, gRPC with PermissionDenied.
var ErrPermissionDenied = errors.New("permission denied")

// ErrTokenRequired is what a token resolver returns when the request
// carried no token and anonymous requests are not allowed. HTTP answers it
// with 401, gRPC with Unauthenticated. Nothing returns it while ACLs are
// off.
var ErrTokenRequired = errors.New("an ACL token is required: send it in the X-Trellis-Token header (HTTP) or x-trellis-token metadata (gRPC)")

// Authorizer answers whether the caller may do something: nil when it may,
// an error wrapping ErrPermissionDenied when it may not. Any other error is
// a fault of the authorizer, reported as an internal error.
type Authorizer interface {
	// OperatorRead and OperatorWrite cover cluster-wide operator actions
	// and cluster-scoped resources.
	OperatorRead() error
	OperatorWrite() error
	// NamespaceRead and NamespaceWrite cover resources in a namespace.
	NamespaceRead(namespace string) error
	NamespaceWrite(namespace string) error
	// Agent covers what an agent does for its instance: register it,
	// heartbeat, watch the tasks placed on it.
	Agent() error
	// Server covers the calls servers make to each other: forwarding to
	// the leader, cluster membership.
	Server() error
}

// AllowAll permits everything. It is every caller's Authorizer until ACLs
// are turned on.
type AllowAll struct{}

func (AllowAll) OperatorRead() error         { return nil }
func (AllowAll) OperatorWrite() error        { return nil }
func (AllowAll) NamespaceRead(string) error  { return nil }
func (AllowAll) NamespaceWrite(string) error { return nil }
func (AllowAll) Agent() error                { return nil }
func (AllowAll) Server() error               { return nil }

// DenyAll refuses everything that needs a permission. Tests use it to show
// that every route is guarded.
type DenyAll struct{}

func (DenyAll) OperatorRead() error         { return ErrPermissionDenied }
func (DenyAll) OperatorWrite() error        { return ErrPermissionDenied }
func (DenyAll) NamespaceRead(string) error  { return ErrPermissionDenied }
func (DenyAll) NamespaceWrite(string) error { return ErrPermissionDenied }
func (DenyAll) Agent() error                { return ErrPermissionDenied }
func (DenyAll) Server() error               { return ErrPermissionDenied }
