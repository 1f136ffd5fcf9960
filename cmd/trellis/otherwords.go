package main

// otherTools are the first commands users of Consul and Nomad type, which
// Trellis names otherwise or has not got yet, with what to use instead. A
// bare "unknown command" there leaves a newcomer guessing; these still
// exit with status 2, since nothing was done, but say where to go. Only
// words that are not Trellis commands belong here: a command added later
// under one of them wins, and a test keeps the two apart.
var otherTools = map[string]string{
	"members": "the machines of a Trellis cluster are instances: trellis instance list " +
		"(and the servers: trellis operator raft list-peers)",
	"node":  "a node is an instance here: trellis instance list, trellis instance show NAME, trellis instance drain NAME",
	"nodes": "a node is an instance here: trellis instance list, trellis instance show NAME, trellis instance drain NAME",

	"catalog":  serviceCatalogHint,
	"services": serviceCatalogHint,

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
	serviceCatalogHint = "the service catalog is trellis service: trellis service list, trellis service show NAME " +
		"(and Consul's own HTTP API reads it: /v1/catalog/services, /v1/health/service/NAME; docs/catalog.md)"
	allocHint = "an allocation is a task here: trellis task list -A, trellis task show TASK, trellis task logs TASK"
)
