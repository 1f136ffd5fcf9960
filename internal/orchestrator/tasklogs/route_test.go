package tasklogs

import (
	"errors"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
)

func TestRoute(t *testing.T) {
	all := []string{"a:7703", "b:7703", "c:7703"}
	tests := []struct {
		name                string
		attached, forwarded bool
		self                string
		servers             []string
		want                []Target
	}{
		{"attached here: here alone", true, false, "a:7703", all, []Target{{Local: true}}},
		{"attached here, forwarded: here", true, true, "a:7703", all, []Target{{Local: true}}},
		{"elsewhere: the others in order, not self", false, false, "b:7703", all, []Target{{Addr: "a:7703"}, {Addr: "c:7703"}}},
		{"forwarded and not here: nowhere (one hop at most)", false, true, "b:7703", all, nil},
		{"in memory: nowhere", false, false, "", nil, []Target{}},
		{"duplicates and empty addresses left out", false, false, "a:7703", []string{"", "b:7703", "b:7703", "a:7703"}, []Target{{Addr: "b:7703"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Route(tt.attached, tt.forwarded, tt.self, tt.servers)
			if len(got) != len(tt.want) || (len(got) > 0 && !reflect.DeepEqual(got, tt.want)) {
				t.Errorf("Route = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTryNext(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{notAttached("i-1"), true},
		{status.Error(codes.Unavailable, "server down"), true},
		{status.Error(codes.Unimplemented, "older server"), true},
		{status.Error(codes.NotFound, "task default/t1 has no container db"), false},
		{status.Error(codes.FailedPrecondition, "not started"), false},
		{status.Error(codes.Canceled, "reader gone"), false},
		{status.Error(codes.PermissionDenied, "no"), false},
		{errors.New("plain"), false},
	}
	for _, tt := range tests {
		if got := TryNext(tt.err); got != tt.want {
			t.Errorf("TryNext(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestCheckRequest(t *testing.T) {
	ok := func() *pbagent.LogRequest {
		return &pbagent.LogRequest{Instance: "i-1", Namespace: "default", Name: "t1", Container: "app", Stream: Stdout}
	}
	if err := CheckRequest(ok()); err != nil {
		t.Fatalf("a good request: %v", err)
	}
	for _, tt := range []struct {
		edit func(*pbagent.LogRequest)
		want string
	}{
		{func(r *pbagent.LogRequest) { r.Instance = "" }, "instance: required"},
		{func(r *pbagent.LogRequest) { r.Namespace = "" }, "namespace: required"},
		{func(r *pbagent.LogRequest) { r.Name = "" }, "name: required"},
		{func(r *pbagent.LogRequest) { r.Container = "" }, "container: required"},
		{func(r *pbagent.LogRequest) { r.Stream = "stdin" }, `stream: "stdin" is not stdout or stderr`},
	} {
		r := ok()
		tt.edit(r)
		err := CheckRequest(r)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tt.want {
			t.Errorf("CheckRequest = %v, want InvalidArgument %q", err, tt.want)
		}
	}
}

// The agent's refusal crosses the first chunk as it was said; what is not
// a gRPC status, or is out of range, arrives as INTERNAL.
func TestFirstChunkCarriesTheRefusal(t *testing.T) {
	for _, tt := range []struct {
		in   error
		code codes.Code
		msg  string
	}{
		{nil, codes.OK, ""},
		{status.Error(codes.NotFound, "task default/t1 has no container db"), codes.NotFound, "task default/t1 has no container db"},
		{status.Error(codes.FailedPrecondition, "not started"), codes.FailedPrecondition, "not started"},
		{errors.New("disk on fire"), codes.Internal, "disk on fire"},
	} {
		c := firstChunk("r1", tt.in)
		if c.GetRequestId() != "r1" {
			t.Errorf("request id %q", c.GetRequestId())
		}
		err := openError(c)
		if status.Code(err) != tt.code || (err != nil && status.Convert(err).Message() != tt.msg) {
			t.Errorf("%v crossed as %v", tt.in, err)
		}
	}
	if err := openError(&pbagent.LogChunk{Code: 99}); status.Code(err) != codes.Internal {
		t.Errorf("an unknown code crossed as %v", err)
	}
	if IsNotAttached(status.Error(codes.NotFound, "the agent of instance i-1 is not attached to this server")) {
		t.Error("a NOT_FOUND without the ErrorInfo was taken for NOT_ATTACHED")
	}
}
