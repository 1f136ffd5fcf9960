// Package leaves is the agent's leaf cache: the Connect CA certificates
// the agent holds for itself (its agent leaf, spiffe://<td>/agent/client/
// dc/<dc>/id/<instance>) and for the services of the tasks it runs (a
// service leaf, spiffe://<td>/ns/<ns>/dc/<dc>/svc/<svc>).
//
// Every key is made on the agent and never leaves it: the cache sends the
// servers a CSR (CAService.Sign) and keeps the key and the signed leaf in
// memory. Local consumers (the agent's own mTLS to the servers, later the
// sidecar proxy) take them from Get and AgentCertificate, which always
// return the newest leaf, so a renewal applies from the next handshake on.
//
// # Design decisions
//
//   - When to sign is a pure decision over plain values (internal/ca's
//     LeafSchedule, NextSignAt, OnRootChange, SignRetryDelay, shared with
//     the servers' own leaves), tested with tables; the
//     cache's loop only acts on it.
//   - Renewal at ca.LeafRenewAt with a fresh random r per leaf, a point
//     between 60 % and 90 % of its life, so the leaves a fleet got at one
//     moment are not renewed at the next same moment.
//   - A root change (the active root id the servers report changes)
//     re-signs every leaf after ca.ResignDelay over a window (the
//     agent's -ca-resign-window, 30 s by default), each leaf with its
//     own draw, so 5,000 agents do not all sign in the same second.
//   - A refusal for the servers' limit (ResourceExhausted) is retried no
//     sooner than the retry-after the server sent, with a jittered
//     exponential backoff on top; any other failure backs off the same
//     way. A leaf that still verifies is served meanwhile.
//   - Services: the task definition has no service name yet, so a
//     service is named by the task definition's family in its namespace
//     (the mesh issue adds services later). A service's leaf is dropped
//     when the last task of its family is gone from the agent.
//   - The roots pool a consumer gets holds every root the servers list,
//     active or not, so a peer holding a leaf of either side of a
//     rotation verifies.
package leaves
