// Package ca is the Connect CA of the service mesh: the trust that every
// mesh certificate (a sidecar's, an agent's, a server's) chains to.
//
// This part of the package is its pure core, with no I/O and no clock:
// SPIFFE ids (spiffe.go), keys and PEM (keys.go), the checks every
// certificate signing request passes (csr.go), the certificates the CA
// makes — roots, cross-signed roots, leaves, intermediates of secondary
// datacenters (certs.go), leaves through the leaf encoder (leaf.go,
// der.go) — and the timing policy: which root to prune,
// when to renew (decisions.go). The CA manager on the leader, the signing
// service on every server, the agents' leaf cache and the CLI call these;
// time always arrives as an argument.
//
// # Identities
//
// Services are spiffe://<td>/ns/<ns>/dc/<dc>/svc/<svc> and client agents
// spiffe://<td>/agent/client/dc/<dc>/id/<instance>, where the trust
// domain td is <cluster-id>.trellis. ParseID accepts exactly these forms,
// in lower case, because an identity with two spellings could be granted
// two sets of rights.
//
// # Design decisions
//
//   - Rotation by cross-signing. A new root is also signed by the old one
//     (CrossSign), and leaves of the new root carry that certificate in
//     their chain. A peer that still trusts only the old root builds
//     leaf → cross-signed new root → old root; a peer that already trusts
//     only the new root stops at the new root. So roots can be rotated
//     while proxies pick up the new bundle at their own pace, with no
//     moment when two peers with different bundles refuse each other.
//     Roots allow two CA certificates below them (MaxPathLen 2) for the
//     longest chain this makes: leaf → secondary's intermediate →
//     cross-signed root → old root.
//   - Random 128-bit serials, no Raft write per signature. A serial drawn
//     from 128 random bits (well above the 64 the CA/Browser Forum asks)
//     is unique without coordination, so any server, follower or leader,
//     signs with the key it already holds and records nothing. The CA is
//     then never the bottleneck that a replicated counter would make it.
//     The price: there is no list of issued leaves, which is why leaves
//     are short-lived (72 h by default) rather than revocable.
//   - Not-before one minute back. A leaf is valid from a minute before it
//     was signed, so a peer whose clock is slightly behind the signer's
//     does not refuse a certificate made a moment ago.
//   - Nothing from the CSR but its key and its URI SAN. The CA writes
//     every name, usage and lifetime of a leaf itself; a CSR asking for a
//     CA certificate is refused outright, and one asking for DNS names is
//     simply not granted them.
//   - Leaves by a leaf encoder of our own (leaf.go), every other
//     certificate by x509.CreateCertificate. The CA signs leaves by the
//     thousand; CreateCertificate verifies each signature it has just
//     made (an ECDSA verification, as costly as the CSR's own) and
//     encodes its template by reflection. LeafIssuer encodes what a
//     signing key's leaves share once, writes the rest in DER by hand
//     (der.go) and signs with the key's crypto.Signer: hashing and
//     signing stay Go's, only the byte layout is ours, and tests hold it
//     to CreateCertificate's output byte for byte up to the signature,
//     for every key type the CA signs with. The check it skips is the
//     caller's: SignLeaf checks every leaf; the signing service checks a
//     key's first leaf and a sample after (camodule).
//   - Errors name the reason. A refused CSR is a *Refusal whose Reason is
//     a fixed metric label (not_pem, bad_signature, trust_domain, ...) and
//     whose Field names the part of the request at fault. No error here
//     ever quotes a private key.
package ca
