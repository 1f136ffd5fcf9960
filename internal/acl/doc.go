// Package acl is the authorization layer every request goes through: the
// Authorizer a caller's token resolves to, the Permission each HTTP route and
// gRPC method declares, and Check, the one pure decision between them.
//
// Two levels check a request. First its route or method: the HTTP
// middleware and the gRPC interceptors look up the Permission it declared
// and Check the caller's Authorizer against it; a route or method that
// declared nothing is refused (fail closed). Then, for the resource API,
// each resource: the resource service calls its type's ACL hooks with the
// same Authorizer, since one request (a batch, a list of every namespace)
// touches resources that need different permissions. Routes that leave the
// decision to those hooks declare PerResource.
//
// Until tokens, policies and roles exist, every caller resolves to
// AllowAll; the checks run on every request all the same, so that turning
// ACLs on changes the Authorizer and nothing else.
package acl
