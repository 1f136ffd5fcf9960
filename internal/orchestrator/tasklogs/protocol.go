package tasklogs

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
)

// ErrorDomain is the domain of the ErrorInfo details of this package's
// refusals.
const ErrorDomain = "logs.trellis.dev"

// ReasonNotAttached: the instance's agent has no link to the server
// asked (codes.NotFound).
const ReasonNotAttached = "NOT_ATTACHED"

// Streams a LogRequest may name.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// ChunkSize is the most output one chunk carries.
const ChunkSize = 32 << 10

// CheckRequest refuses a request that names no task, container or
// instance, or an unknown stream, naming the field.
func CheckRequest(req *pbagent.LogRequest) error {
	for _, f := range []struct{ name, v string }{
		{"instance", req.GetInstance()}, {"namespace", req.GetNamespace()},
		{"name", req.GetName()}, {"container", req.GetContainer()},
	} {
		if f.v == "" {
			return status.Errorf(codes.InvalidArgument, "%s: required", f.name)
		}
	}
	switch req.GetStream() {
	case Stdout, Stderr:
	default:
		return status.Errorf(codes.InvalidArgument, "stream: %q is not stdout or stderr", req.GetStream())
	}
	return nil
}

// notAttached is the refusal of a server that does not hold the
// instance's agent.
func notAttached(instance string) error {
	st := status.New(codes.NotFound, fmt.Sprintf("the agent of instance %s is not attached to this server", instance))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonNotAttached, Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// IsNotAttached reports whether err is a server's "not attached here".
func IsNotAttached(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.NotFound {
		return false
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain && info.GetReason() == ReasonNotAttached {
			return true
		}
	}
	return false
}

// firstChunk is the agent's first chunk of SendLogs for request id:
// openErr is why the logs cannot be read, nil when they are coming. An
// error that is not a gRPC status is INTERNAL.
func firstChunk(id string, openErr error) *pbagent.LogChunk {
	c := &pbagent.LogChunk{RequestId: id}
	if openErr != nil {
		st := status.Convert(openErr)
		code := st.Code()
		if code == codes.OK || code == codes.Unknown {
			code = codes.Internal
		}
		c.Code, c.Message = int32(code), st.Message()
	}
	return c
}

// errBadFirstChunk refuses a SendLogs whose first chunk names no request.
var errBadFirstChunk = errors.New("the first chunk of SendLogs names no request (request_id)")

// openError is what a first chunk says of the read: nil when the logs are
// coming, else the agent's refusal as a gRPC status. A code outside
// gRPC's is INTERNAL.
func openError(c *pbagent.LogChunk) error {
	code := codes.Code(c.GetCode())
	if code == codes.OK {
		return nil
	}
	if code > codes.Unauthenticated {
		code = codes.Internal
	}
	msg := c.GetMessage()
	if msg == "" {
		msg = "the agent cannot read the logs"
	}
	return status.Error(code, msg)
}

// attachRefusal says why an Attach naming instance was refused, the
// caller being proven the agent of proven ("" for none).
func attachRefusal(instance, proven string) string {
	if proven == "" {
		return "Attach names instance " + instance + ", but the caller is proven to be no agent: it presents no Connect agent leaf, and names no session its instance registered last (x-trellis-agent-instance, x-trellis-agent-session)"
	}
	return "Attach names instance " + instance + ", but the caller is the agent of instance " + proven
}
