// Package mesh holds the mesh's policy types and the decision made from
// them: Intentions (mesh/v1/Intentions, who may call a destination
// service) and MeshConfig (mesh/v1/MeshConfig, the default action, the
// transparent proxy's defaults, the mTLS mode), their validation, and
// Decide, the one function that says whether a caller may reach a
// destination and which rule said so. The CLI's `trellis intention
// check`, the proxy and the xDS encoder all ask Decide.
//
// Design decisions:
//
//   - One Intentions resource per destination service, named after it in
//     its namespace, holding every source of that destination (as
//     Consul's service-intentions config entry does): a destination's
//     policy is read and written as one unit, with one version, so two
//     edits of it cannot interleave, and the agent watches exactly the
//     resources named after the services its proxies front.
//   - A source is decided either by an action for the whole connection
//     (L4) or by L7 HTTP permissions evaluated per request, never both:
//     with both, which one applies would depend on whether the proxy sees
//     HTTP, and the same caller would get two answers.
//   - Precedence is Consul's: a rule's rank is fixed by which of its four
//     names (destination namespace and name, source namespace and name)
//     are exact and which are "*" — the destination first, then the
//     source, the namespace before the name — and the most specific rule
//     that matches decides alone. Permissions of the deciding source are
//     evaluated in order, first match wins; a request none matches gets
//     the default action, not a less specific rule. So adding a broad rule
//     never changes what a specific one decides, and the decision never
//     depends on the order rules were written in (a property test holds
//     it to that).
//   - The default action is a stored value (MeshConfig.default_intention),
//     not a flag: every server and agent decides with the same one, and it
//     changes without a restart. The servers create MeshConfig when it is
//     missing, with "allow" while ACLs allow by default (they do in every
//     cluster today, `trellis dev` included); a cluster whose ACLs deny by
//     default will get "deny".
//   - Regular expressions are Go's RE2 (linear time, as Envoy's), and
//     match the whole path or header value, as Envoy's safe_regex does, so
//     that the built-in proxy and Envoy agree.
//   - A wildcard destination ("*": every service of a namespace, or of
//     every namespace) is part of Decide's input and precedence, but no
//     resource expresses it yet: a resource name is a DNS label. Until one
//     does, MeshConfig.default_intention is the rule for every destination.
package mesh
