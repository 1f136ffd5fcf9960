// Package driver is the contract between the agent and the task drivers
// that run a task's containers: exec (a process group per container) and
// docker (a container through the Docker Engine API), plus the simulated
// driver of `trellis sim`.
//
// A driver knows how to start one container, wait for it, signal it, read
// its logs and find it again after the agent restarts. It knows nothing of
// tasks, dependencies, health or restart policies: those belong to the
// agent's task lifecycle, which drives every driver the same way.
package driver
