package main

// otherTools are the first commands users of Consul and Nomad type, which
// Trellis names otherwise or has not got yet, with what to use instead. A
// bare "unknown command" there leaves a newcomer guessing; these still
// exit with status 2, since nothing was done, but say where to go. A key
// is the words after "trellis": a word given to trellis itself (members),
// or a command's path and the word given to it (server members); two words
// given to trellis (catalog nodes) say more than the first alone. Only
// words that are not Trellis commands belong here: a command added later
// under one of them wins, and a test keeps the two apart.
var otherTools = map[string]string{
	"members": "the machines of a Trellis cluster are instances: trellis instance list " +
		"(and the servers: trellis operator raft list-peers)",
	"node":          nodeHint,
	"nodes":         nodeHint,
	"catalog nodes": nodeHint,
	"server members": "the servers are the Raft peers: trellis operator raft list-peers " +
		"(of servers started with -data-dir; trellis dev in memory is one server without Raft)",

	"catalog":  serviceCatalogHint,
	"services": serviceCatalogHint,
	"connect ca": "the Connect CA is trellis ca: trellis ca roots, trellis ca config get, trellis ca config set -f FILE, " +
		"trellis ca leaf SERVICE (docs/ca.md)",
	"connect proxy": sidecarHint,
	"connect envoy": sidecarHint,

	"acl": "Trellis does not enforce ACLs yet: any caller who reaches the API may do anything, so keep its " +
		"ports where only trusted callers reach them (docs/tls.md)",
	"ui": "Trellis has no web UI yet: the CLI (trellis --help) and the HTTP API (docs/http-api.md)",

	"job": "a Nomad job is a task definition here (trellis taskdef register -f FILE), run on every matching " +
		"instance by an environment (trellis env create, trellis deploy) or once on one instance (trellis task run)",
	"jobs":        "task definitions and the environments that run them: trellis taskdef list, trellis env list",
	"alloc":       allocHint,
	"allocs":      allocHint,
	"allocation":  allocHint,
	"allocations": allocHint,
	"status":      "there is no one summary: trellis instance list (machines), trellis env list (environments), trellis task list -A (tasks)",

	"join":  "a server joins when it starts: trellis server -retry-join ADDR (docs/cluster.md); an agent names the servers with trellis agent -server ADDR",
	"leave": "an agent leaves with trellis agent leave (its tasks stop and its instance is marked left)",
	"kv":    "Trellis has no key/value store; state is typed resources: trellis resource apply, get, list and watch",
}

const (
	nodeHint           = "a node is an instance here: trellis instance list, trellis instance show NAME, trellis instance drain NAME"
	serviceCatalogHint = "the service catalog is trellis service: trellis service list, trellis service show NAME, " +
		"trellis service register -f FILE for a service outside Trellis " +
		"(and Consul's own HTTP API reads it: /v1/catalog/services, /v1/health/service/NAME; docs/catalog.md)"
	sidecarHint = "the sidecar proxy is trellis proxy, which the agent runs in every task with a mesh block (docs/mesh.md); " +
		"trellis connect redirect-traffic writes a task's redirect rules"
	allocHint = "an allocation is a task here: trellis task list -A, trellis task show TASK, trellis task logs TASK"
)
