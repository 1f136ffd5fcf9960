package heartbeat

import (
	"time"

	"trellis.dev/trellis/internal/orchestrator"
)

// Liveness is the verdict on one instance at one moment.
type Liveness struct {
	// Expired: no heartbeat for a whole TTL.
	Expired bool
	// Deadline is when the instance expires, or expired, unless it is heard
	// from before.
	Deadline time.Time
}

// Judge is the verdict on an instance last heard from at lastHeard, at
// now. An instance expires when a whole TTL has passed without a heartbeat:
// at lastHeard+ttl exactly, it is expired.
// It is JudgeLate with no lateness of the leader's own.
func Judge(lastHeard, now time.Time, ttl time.Duration) Liveness {
	return JudgeLate(lastHeard, now, ttl, Lateness{})
}

// Registration is what the store says of an instance, as far as a
// heartbeat is concerned.
type Registration struct {
	// Found: an Instance of that name is stored.
	Found bool
	// Status and Session are the stored Instance's.
	Status  string
	Session string
}

// Admit decides whether a heartbeat from session may keep an instance
// registered as reg alive: "" when it may, else the reason it may not.
// A session other than the stored one is refused before the status is
// looked at: that heartbeat comes from an agent process that no longer
// owns the instance, whatever state the instance is in.
func Admit(reg Registration, session string) Reason {
	switch {
	case !reg.Found:
		return ReasonNotRegistered
	case reg.Session != session:
		return ReasonSessionMismatch
	case reg.Status == orchestrator.InstanceDown:
		return ReasonDown
	case reg.Status == orchestrator.InstanceLeft:
		return ReasonLeft
	case reg.Status == orchestrator.InstanceReady, reg.Status == orchestrator.InstanceDraining:
		return ""
	}
	// A status this server does not know (a newer server wrote it): the
	// agent cannot fix that by registering again, but refusing is safer
	// than keeping alive what the store does not call alive.
	return ReasonDown
}
