// Package taskrunner is the agent's task runner: the lifecycle engine
// (internal/agent/lifecycle) behind the agent's TaskRunner interface. It
// maps a TaskDefinition onto the lifecycle's plain spec, runs or resumes
// it over the agent's drivers, and turns every lifecycle state into the
// Snapshot the agent reports and saves.
//
// The mapping is pure (Build, Snapshot); New wires it to a lifecycle
// Runner.
package taskrunner
