package acl

import (
	"errors"
	"fmt"
)

// Permission is what a route or method needs of its caller. The zero value
// is Undeclared, which Check refuses: a route someone forgot to declare is
// closed, not open.
type Permission int

const (
	// Undeclared is a route or method that declared nothing. Refused.
	Undeclared Permission = iota
	// Public needs nothing: health probes, leader discovery, the API's own
	// "no such path" and "method not allowed" answers, gRPC reflection
	// (schemas only, the ones api/ publishes).
	Public
	// OperatorRead and OperatorWrite are cluster-wide operator actions:
	// Raft peers, snapshots, metrics, profiles.
	OperatorRead
	OperatorWrite
	// NamespaceRead and NamespaceWrite cover the namespace the request
	// names (the ?namespace= query; "default" when it names none).
	NamespaceRead
	NamespaceWrite
	// Agent is an agent acting for its instance.
	Agent
	// Server is a server of this cluster calling another.
	Server
	// PerResource leaves the decision to the ACL hooks of each resource's
	// type, which the resource service calls on every resource the
	// request touches: one request (a batch, a list of every namespace)
	// may touch resources that need different permissions, and a type
	// may declare its own. Check lets it through.
	PerResource
)

var permissionNames = map[Permission]string{
	Undeclared:     "undeclared",
	Public:         "public",
	OperatorRead:   "operator:read",
	OperatorWrite:  "operator:write",
	NamespaceRead:  "namespace:read",
	NamespaceWrite: "namespace:write",
	Agent:          "agent",
	Server:         "server",
	PerResource:    "per-resource",
}

// String names the permission as the docs and errors do ("operator:write").
func (p Permission) String() string {
	if s, ok := permissionNames[p]; ok {
		return s
	}
	return fmt.Sprintf("Permission(%d)", int(p))
}

// Declared reports whether p is a permission a route may declare.
func (p Permission) Declared() bool {
	_, ok := permissionNames[p]
	return ok && p != Undeclared
}

// WildcardNamespace names every namespace in a list or a watch.
const WildcardNamespace = "*"

// PermissionDeniedError is Check's refusal. It wraps ErrPermissionDenied
// and the authorizer's reason.
type PermissionDeniedError struct {
	Permission Permission
	// Namespace is the namespace a namespace permission was asked for.
	Namespace string
	// Reason is the authorizer's refusal; nil for an undeclared route.
	Reason error
}

func (e *PermissionDeniedError) Error() string {
	if !e.Permission.Declared() {
		return "permission denied: this route declares no permission, so it is closed"
	}
	msg := "permission denied: this request needs " + e.Permission.String()
	if e.Permission == NamespaceRead || e.Permission == NamespaceWrite {
		msg += fmt.Sprintf(" on namespace %q", e.Namespace)
	}
	// The bare sentinel adds nothing; an authorizer's reason ("token
	// expired") does.
	if e.Reason != nil && e.Reason != ErrPermissionDenied {
		msg += ": " + e.Reason.Error()
	}
	return msg
}

// Is makes errors.Is(err, ErrPermissionDenied) true.
func (e *PermissionDeniedError) Is(target error) bool { return target == ErrPermissionDenied }

// Unwrap returns the authorizer's reason.
func (e *PermissionDeniedError) Unwrap() error { return e.Reason }

// Check decides whether a may do what permission p covers; ns is the
// namespace the request names, used by the namespace permissions only. It
// returns nil, a *PermissionDeniedError, or the authorizer's own failure
// (not a refusal) unchanged.
//
// Reading every namespace ("*") is allowed as such: what is read goes
// through each resource's type hooks, which hide what the caller may not
// read, as a list of the resource API does.
func Check(a Authorizer, p Permission, ns string) error {
	var err error
	switch p {
	case Public, PerResource:
		return nil
	case OperatorRead:
		err = a.OperatorRead()
	case OperatorWrite:
		err = a.OperatorWrite()
	case NamespaceRead:
		if ns == WildcardNamespace {
			return nil
		}
		err = a.NamespaceRead(ns)
	case NamespaceWrite:
		err = a.NamespaceWrite(ns)
	case Agent:
		err = a.Agent()
	case Server:
		err = a.Server()
	default:
		return &PermissionDeniedError{Permission: p}
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrPermissionDenied) {
		return &PermissionDeniedError{Permission: p, Namespace: ns, Reason: err}
	}
	return fmt.Errorf("checking %s: %w", p, err)
}
