// Package sidecar adds the mesh's sidecar proxy to a task: Inject is a
// pure transform of a task definition that, for a bridge definition with
// a mesh block, adds the container trellis-proxy (the exec driver running this
// binary's `trellis proxy`) and makes every other container wait for it
// to be healthy, so that seed 000's timeline holds: mesh-init, proxy
// started, proxy healthy, app started; and on stop, the app exits before
// the proxy (the proxy is a sidecar of the lifecycle).
//
// The agent injects, not the servers: the proxy's command names the
// agent's own executable and the task's directory on its instance, facts
// of the agent alone, and the stored definition stays what its author
// wrote (taskdef show prints no container the author did not write).
//
// A host task gets no proxy: the proxy's ports are fixed (15000, 15001,
// 19000) and a host task's ports are the instance's, shared by every host
// task, so two host mesh tasks on one instance could not both have one.
// A host mesh task is registered in the catalog and runs without a proxy.
package sidecar
