// Package camodule is the Connect CA as a module of the server
// (internal/module): the CA's types (internal/ca), the CA manager that
// runs on the leader and makes sure the cluster has exactly one active
// root, and the CA's read routes, /v1/ca/roots and /v1/ca/config.
//
// Design decisions:
//
//   - The manager is a controller on the one CAConfig. It also watches
//     the cluster's identity (core/v1/Cluster), which always exists once
//     the cluster has bootstrapped, so a new leader reconciles the CA
//     even before any CAConfig has been written: the resync every gain
//     of leadership brings is the manager's "on leadership" hook, and the
//     controller runtime's backoff is its background retry.
//   - A root and its sealed signing key are written in one batch, with a
//     compare that no CARoot was created or changed since the manager
//     listed them. Two leaders in a row (or a reconcile that raced
//     another) can therefore never both add a root: the second's batch
//     fails, it retries, and finds the first's root active.
//   - The routes never return a private key: /v1/ca/roots shows CARoots,
//     which hold none, and /v1/ca/config clears the write-only key field
//     even though a stored CAConfig never holds one.
package camodule
