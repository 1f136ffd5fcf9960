// Package orchestrator holds the orchestrator's resource types — Instance,
// TaskDefinition and Task (api/orchestrator/v1) — with their registration,
// validation and defaults, and the small pure helpers every part of the
// orchestrator shares: names of task definitions ("family:revision"),
// the vocabulary of statuses, and how an instance's status follows from
// what is known of it. A task definition's mesh block (mesh.go) is
// checked here too: the mesh's agent components read it, but what a
// definition may say is the definition's rule, refused at registration.
//
// The agent (internal/agent), the server's instance and task controllers
// (internal/orchestrator/controllers) and the CLI all work on these types
// through the generic resource API; nothing here does I/O.
package orchestrator
