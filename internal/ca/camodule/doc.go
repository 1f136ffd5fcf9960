// Package camodule is the Connect CA as a module of the server
// (internal/module): the CA's types (internal/ca), the CA manager that
// runs on the leader and keeps the cluster at exactly one active root —
// making the first, rotating to a new one when the configuration asks,
// pruning the old ones —, the signer that every server runs (the gRPC
// CAService and POST /v1/ca/sign) and the CA's routes, /v1/ca/roots and
// /v1/ca/config.
//
// Design decisions:
//
//   - The manager is a controller on the one CAConfig. It also watches
//     the cluster's identity (core/v1/Cluster), which always exists once
//     the cluster has bootstrapped, so a new leader reconciles the CA
//     even before any CAConfig has been written: the resync every gain
//     of leadership brings is the manager's "on leadership" hook, and the
//     controller runtime's backoff is its background retry. It asks to
//     run again when the next root rotated out is due to be pruned.
//   - Every change of the roots is one batch with a compare that no
//     CARoot was created or changed since the manager listed them: the
//     first root with its sealed signing key; a rotation's new root, its
//     key and the old root rotated out. Two leaders in a row (or a
//     reconcile that raced another) can therefore never both add a root:
//     the second's batch fails, it retries, and finds the first's root.
//     A rotation that fails leaves the old root active.
//   - What to do is decided in internal/ca from plain values: whether the
//     active root still answers the configuration (ca.RotationReason),
//     which roots to prune (ca.RootsToPrune, ca.NextPruneAt); the change a
//     PUT of the configuration makes (planConfigChange) is a function of
//     the stored configuration, the request and the active root.
//   - A supplied root's key goes from the request straight into a sealed
//     CASigningKey, in the same batch as the configuration, which never
//     holds it. The manager then rotates to the root like to a generated
//     one. A PUT merges: the settings it leaves out keep their values, so
//     an answer of GET sent back changes nothing, and a raised rotation is
//     the only way to ask for a new root with the same settings.
//   - The signer runs on every server, not only the leader, and never
//     asks the leader anything per certificate: it watches the roots, the
//     sealed signing keys and the CAConfig in its own server's replicated
//     state (a watch per type, opened again with backoff), and keeps the
//     active root's key parsed in memory (signingState, swapped
//     atomically; parsed again only when the root or key changes). What
//     to sign with is decided from plain values (buildSigningState). When
//     the stored CA cannot be signed with — a rotation's new root
//     replicated a moment before its key, say — it keeps signing with
//     what it had: leaves of the previous root stay valid until it is
//     pruned.
//   - Leaves are made by the leaf encoder (ca.LeafIssuer), which does not
//     verify each signature it makes as x509.CreateCertificate does (a
//     third of a leaf's cost). The signer checks instead, per signing
//     key: every leaf until one has verified, then one in 1,000
//     (selfcheck.go: checkDue decides, from plain values). A key whose
//     leaf fails the check signs nothing more on this server (Unavailable,
//     so agents ask another server), logged and counted; a new key starts
//     afresh.
//   - Each server with TLS signs its own leaf (serverleaf.go), a leaf of
//     its server identity spiffe://<td>/server/dc/<dc>/id/<raft node id>,
//     with the key the signer holds: no RPC, no CSR, no limit, and the
//     signing service refuses that identity to everyone else. It follows
//     the signer's state: a leaf as soon as the signer can sign, renewed
//     and re-signed after a rotation by the agents' rules (ca.LeafSchedule,
//     ca.OnRootChange over a short window, DefaultServerResignWindow), its
//     key made on the server and kept in memory, each new leaf handed to
//     the server's TLS (module.ServerCerts), which presents it to the
//     peers that ask for it.
//   - A per-server limit (Limiter: a token bucket for
//     csr_max_per_second, a count for csr_max_concurrent, time given to
//     it) refuses at once with a retry-after instead of queueing; the
//     defaults are above what a server's CPU signs, so the limit is a
//     ceiling an operator chooses, not the usual bottleneck.
//   - The routes never return a private key: /v1/ca/roots shows CARoots,
//     which hold none, and /v1/ca/config clears the write-only key field
//     even though a stored CAConfig never holds one.
//   - A secondary datacenter (Config.PrimaryDatacenter other than the
//     server's) runs the same manager with a PrimaryCA: it makes no root,
//     but copies the primary's roots and has the primary sign an
//     intermediate for a key of its own, stored sealed as the active
//     root's signing key (secondary.go). It reaches the primary on its
//     public gRPC port, since the two clusters' server CAs differ and
//     neither's server-to-server port takes the other's servers; the
//     roots come through the resource API (anyone reads CARoots), the
//     intermediate through CAService.SignIntermediate (permission server).
//     It polls (jittered) rather than holds a watch on the primary, which
//     keeps the manager a plain controller whose requeue is the poll.
//     Whether a new intermediate is needed, and whether the answers are a
//     primary's, is decided in internal/ca (IntermediateReason,
//     CheckPrimaryRoots, CheckIntermediate); nothing is stored until both
//     the roots and the intermediate have passed.
package camodule
