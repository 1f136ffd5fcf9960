package resource

import "errors"

// ErrPermissionDenied is wrapped by every authorization refusal.
var ErrPermissionDenied = errors.New("permission denied")

// Authorizer answers whether the caller may do something. Until ACLs land it
// is AllowAll; the hooks are called on every request all the same.
type Authorizer interface {
	// OperatorRead and OperatorWrite cover cluster-wide operator actions.
	OperatorRead() error
	OperatorWrite() error
	// NamespaceRead and NamespaceWrite cover resources in a namespace.
	NamespaceRead(namespace string) error
	NamespaceWrite(namespace string) error
}

// AllowAll permits everything.
type AllowAll struct{}

func (AllowAll) OperatorRead() error         { return nil }
func (AllowAll) OperatorWrite() error        { return nil }
func (AllowAll) NamespaceRead(string) error  { return nil }
func (AllowAll) NamespaceWrite(string) error { return nil }
