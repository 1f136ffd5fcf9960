package heartbeat

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reason says why a heartbeat was refused. It travels as the Reason of a
// google.rpc.ErrorInfo detail (domain ErrorDomain) on the gRPC status, so
// an agent acts on it without parsing messages; ReasonOf reads it back.
type Reason string

// The reasons a heartbeat is refused. Every one of them asks the agent to
// register its Instance again (see the package comment).
const (
	// ReasonNotRegistered: no Instance of that name is stored (it was
	// never registered, or it was removed). codes.NotFound.
	ReasonNotRegistered Reason = "NOT_REGISTERED"
	// ReasonSessionMismatch: the stored Instance carries another session:
	// another agent process registered it since. codes.FailedPrecondition.
	ReasonSessionMismatch Reason = "SESSION_MISMATCH"
	// ReasonDown: the instance is down, or being marked down, because the
	// servers heard nothing from it for a TTL. codes.FailedPrecondition.
	ReasonDown Reason = "INSTANCE_DOWN"
	// ReasonLeft: the instance left the cluster. codes.FailedPrecondition.
	ReasonLeft Reason = "INSTANCE_LEFT"
)

// ErrorDomain is the domain of the ErrorInfo details of refusals.
const ErrorDomain = "heartbeat.trellis.dev"

// ErrNotLeader is what the Tracker answers while this server is not the
// leader (or not yet a caught-up one): the heartbeat belongs elsewhere.
var ErrNotLeader = errors.New("this server is not the leader: heartbeats are kept by the leader")

// refusal is the gRPC status error for a refused heartbeat.
func refusal(r Reason, instance string, reg Registration, session string, ttl time.Duration) error {
	code := codes.FailedPrecondition
	var msg string
	switch r {
	case ReasonNotRegistered:
		code = codes.NotFound
		msg = fmt.Sprintf("instance %q is not registered: write its Instance, then heartbeat", instance)
	case ReasonSessionMismatch:
		msg = fmt.Sprintf("instance %q is registered by session %q, not %q: another agent process registered it; register again to take it over", instance, reg.Session, session)
	case ReasonDown:
		msg = fmt.Sprintf("instance %q is down: no heartbeat for %s; register it again (a new session, status ready or draining) before heartbeating", instance, ttl)
	case ReasonLeft:
		msg = fmt.Sprintf("instance %q has left the cluster; register it again to rejoin", instance)
	default:
		msg = fmt.Sprintf("instance %q: heartbeat refused (%s)", instance, r)
	}
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{
		Reason:   string(r),
		Domain:   ErrorDomain,
		Metadata: map[string]string{"instance": instance},
	}); err == nil {
		st = d
	}
	return st.Err()
}

// ReasonOf returns the Reason of a refused heartbeat's error, or "" when
// err is not a refusal (a transport error, Unavailable while there is no
// leader: retry those as they are).
func ReasonOf(err error) Reason {
	st, ok := status.FromError(err)
	if !ok {
		return ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return Reason(info.GetReason())
		}
	}
	return ""
}
