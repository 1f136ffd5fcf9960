package lifecycle

import (
	"fmt"
	"syscall"
	"time"

	"trellis.dev/trellis/internal/agent/health"
	"trellis.dev/trellis/internal/driver"
)

// Event is something that happened to a task, fed to Step.
type Event interface{ isEvent() }

// Tick: time has passed. The first step of a new task is a Tick.
type Tick struct{}

// Resumed: an agent restarted with this state; the first step of a resumed
// task.
type Resumed struct{}

// Started: the driver started a container.
type Started struct {
	Container   string
	Incarnation int
	Handle      driver.Handle
}

// StartFailed: the driver could not start a container.
type StartFailed struct {
	Container   string
	Incarnation int
	Err         string
}

// Exited: a container exited (or was lost: Exit.Code -1 and Exit.Err set).
type Exited struct {
	Container   string
	Incarnation int
	Exit        driver.Exit
}

// Probed: a health probe of a container has a result.
type Probed struct {
	Container   string
	Incarnation int
	Result      health.Result
}

// StopRequested: the task's desired status became STOPPED.
type StopRequested struct {
	Reason string
}

func (Tick) isEvent()          {}
func (Resumed) isEvent()       {}
func (Started) isEvent()       {}
func (StartFailed) isEvent()   {}
func (Exited) isEvent()        {}
func (Probed) isEvent()        {}
func (StopRequested) isEvent() {}

// Env is what a step knows of the world besides the event.
type Env struct {
	Now time.Time
	// Rand is a number in [0, 1) from the runner's random source; the jitter
	// of a restart that the step schedules is drawn from it.
	Rand float64
}

// ActionKind is what an Action asks of the driver.
type ActionKind string

const (
	// ActStart: start the container (after destroying Previous, if set) and
	// report Started or StartFailed, then watch it: report its health
	// probes and its exit.
	ActStart ActionKind = "start"
	// ActRecover: re-attach to Handle after an agent restart and watch it
	// as after a start; report a failure as an Exited with code -1.
	ActRecover ActionKind = "recover"
	// ActSignal: send Signal to Handle.
	ActSignal ActionKind = "signal"
	// ActDestroy: release what Handle holds.
	ActDestroy ActionKind = "destroy"
)

// Action is I/O a step asks of the runner. Actions of one step are
// independent of each other and may run concurrently.
type Action struct {
	Kind        ActionKind
	Container   string
	Incarnation int
	// Handle is the container (recover, signal, destroy).
	Handle driver.Handle
	// Previous is the exited incarnation a restart replaces (start).
	Previous *driver.Handle
	Signal   syscall.Signal
}

func (a Action) String() string {
	switch a.Kind {
	case ActSignal:
		return fmt.Sprintf("signal %s %s", a.Container, a.Signal)
	default:
		return fmt.Sprintf("%s %s", a.Kind, a.Container)
	}
}

// Decision is the outcome of a step.
type Decision struct {
	State   State
	Actions []Action
	// Wake is when the task next needs a Tick (a restart or a SIGKILL falls
	// due); zero when nothing waits on time.
	Wake time.Time
}
