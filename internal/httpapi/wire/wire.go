// Package wire holds the JSON shapes of Trellis's HTTP API: what the server
// writes and what its clients (the CLI, tests, benchmarks) read. It is plain
// structs with no protobuf in them, so that a client needs nothing but
// encoding/json; the server (package httpapi) converts between these and the
// protobuf resource model.
//
// Every field name is the protobuf field name (group_version, not
// groupVersion), and uint64 counters are decimal strings ("generation":"3"),
// as protojson writes them — except the index of a watch event, a plain JSON
// number that is easy to pass back as ?index=N.
package wire

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Type names a resource type.
type Type struct {
	Group        string `json:"group"`
	GroupVersion string `json:"group_version"`
	Kind         string `json:"kind"`
}

// String formats t as group/version/kind.
func (t Type) String() string { return t.Group + "/" + t.GroupVersion + "/" + t.Kind }

// ParseType parses "group/version/kind".
func ParseType(s string) (Type, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return Type{}, fmt.Errorf("%w: %q is not group/version/kind (for example core/v1/Namespace)", ErrBadType, s)
	}
	return Type{Group: parts[0], GroupVersion: parts[1], Kind: parts[2]}, nil
}

// ErrBadType is wrapped by ParseType's errors.
var ErrBadType = fmt.Errorf("bad resource type")

// Tenancy says where a resource lives; cluster-scoped types have no
// namespace.
type Tenancy struct {
	Namespace string `json:"namespace"`
}

// ID identifies a resource.
type ID struct {
	UID     string  `json:"uid"`
	Name    string  `json:"name"`
	Type    Type    `json:"type"`
	Tenancy Tenancy `json:"tenancy"`
}

// Resource is a stored resource as the API returns it. Data is the plain
// JSON form of the type's message (no "@type"); Status maps a controller
// name to its status object ({"observed_generation":"N","conditions":[...],
// "data":{"@type":"type.googleapis.com/...",...}}), whose data is the typed
// payload the key declares, with its "@type" as protojson writes an Any.
type Resource struct {
	ID         ID                         `json:"id"`
	Owner      *ID                        `json:"owner,omitempty"`
	Version    string                     `json:"version"`
	Generation string                     `json:"generation"`
	Metadata   map[string]string          `json:"metadata"`
	Data       json.RawMessage            `json:"data"`
	Status     map[string]json.RawMessage `json:"status"`
}

// WriteRequest is the body of PUT /v1/resources/{group}/{version}/{kind}/{name}.
// Version, when set, makes the write a compare-and-swap. The server also
// accepts, and ignores, the read-only fields a GET returns (id, generation,
// status), so a fetched resource can be edited and put back; an id that
// names another resource than the path is refused.
type WriteRequest struct {
	Data     json.RawMessage   `json:"data,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Version  string            `json:"version,omitempty"`
	Owner    *ID               `json:"owner,omitempty"`
}

// Document is one resource to write, with its type and name in it: a
// member of PUT /v1/batch and a document of `trellis resource apply`.
//
//	type: core/v1/Namespace   # group/version/kind
//	name: prod
//	namespace: ""             # namespaced types only; default "default"
//	metadata: {team: web}     # optional labels
//	version: ""               # optional; set for a compare-and-swap
//	owner: {...}              # optional; an ID
//	data: {description: production}
type Document struct {
	Type      string            `json:"type"`
	Name      string            `json:"name"`
	Namespace string            `json:"namespace,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Version   string            `json:"version,omitempty"`
	Owner     *ID               `json:"owner,omitempty"`
	Data      json.RawMessage   `json:"data,omitempty"`
}

// BatchRequest is the body of PUT /v1/batch: every document is written, or
// none is, and only when every compare holds.
type BatchRequest struct {
	Resources []Document `json:"resources"`
	Compares  []Compare  `json:"compares,omitempty"`
}

// Compare ops.
const (
	CompareVersion      = "version"       // the resource is at version (and uid, when given)
	CompareAbsent       = "absent"        // nothing is stored under the name
	CompareExists       = "exists"        // something is (with uid, when given)
	CompareNothingNewer = "nothing_newer" // nothing of the type in the namespace, name beginning with name, was written after version
)

// Compare is a member of a batch that only compares: it is checked in the
// same atomic step as the batch's writes, and writes nothing.
//
//	op: version            # version, absent, exists or nothing_newer
//	type: scheduler/v1/Environment
//	namespace: prod        # namespaced types only; default "default"
//	name: web              # for nothing_newer, a name prefix ("" for all)
//	uid: ""                # optional, for version and exists
//	version: "41"          # for version and nothing_newer
type Compare struct {
	Op        string `json:"op"`
	Type      string `json:"type"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid,omitempty"`
	Version   string `json:"version,omitempty"`
}

// ListResponse is the body of a list and of a batch write.
type ListResponse struct {
	Resources []*Resource `json:"resources"`
}

// Watch event ops.
const (
	OpUpsert        = "upsert"
	OpDelete        = "delete"
	OpEndOfSnapshot = "end_of_snapshot"
	OpError         = "error"
)

// Event is one line of a watch stream. Resource is absent on
// end_of_snapshot; Error and Code are set only on the final "error" line,
// sent when the server cuts the watch off: with code "gone" the client must
// list again; otherwise it may watch again from Index, the last index the
// stream carried.
type Event struct {
	Op       string    `json:"op"`
	Resource *Resource `json:"resource,omitempty"`
	Index    uint64    `json:"index"`
	Error    string    `json:"error,omitempty"`
	Code     string    `json:"code,omitempty"`
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Error codes: the "code" of an Error, one per HTTP status the API uses.
const (
	CodeInvalidArgument    = "invalid_argument"    // 400
	CodeUnauthenticated    = "unauthenticated"     // 401
	CodePermissionDenied   = "permission_denied"   // 403
	CodeNotFound           = "not_found"           // 404
	CodeMethodNotAllowed   = "method_not_allowed"  // 405
	CodeConflict           = "conflict"            // 409: stale version
	CodeFailedPrecondition = "failed_precondition" // 409: the current state forbids it
	CodeGone               = "gone"                // 410: a watch cannot resume, list again
	CodeTooLarge           = "too_large"           // 413
	CodeCanceled           = "canceled"            // 499
	CodeInternal           = "internal"            // 500
	CodeUnimplemented      = "unimplemented"       // 501
	CodeUnavailable        = "unavailable"         // 503: no leader, retry
	CodeDeadlineExceeded   = "deadline_exceeded"   // 504
)

// Health is the body of GET /v1/health.
type Health struct {
	// Status is "ok" or "unavailable"; Error says why it is unavailable.
	Status string `json:"status"`
	Leader string `json:"leader,omitempty"`
	// Datacenter is the server's datacenter.
	Datacenter string `json:"datacenter,omitempty"`
	Error      string `json:"error,omitempty"`
	Code       string `json:"code,omitempty"`
	// LastContactMS is how long ago this follower last heard from the
	// leader, in milliseconds (absent on the leader).
	LastContactMS *int64 `json:"last_contact_ms,omitempty"`
	// AppliedIndex is the Raft index this server has applied;
	// LeaderIndex the leader's commit index when last asked (Raft
	// servers only).
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	LeaderIndex  uint64 `json:"leader_index,omitempty"`
	// Warnings name what is unsafe about how the server runs, every
	// open door (links between servers in plaintext, ACLs not enforced,
	// plaintext public ports), without making it unhealthy.
	Warnings []string `json:"warnings,omitempty"`
}

// RaftPeer is one server of the Raft configuration
// (GET /v1/operator/raft/peers).
type RaftPeer struct {
	ID         string `json:"id"`
	RaftAddr   string `json:"raft_addr"`
	ServerAddr string `json:"server_addr"` // the server-to-server address (-server-addr)
	Voter      bool   `json:"voter"`
	Leader     bool   `json:"leader"`
}

// RemovedPeer answers DELETE /v1/operator/raft/peers/{peer}.
type RemovedPeer struct {
	Removed string `json:"removed"`
}
