package heartbeat

import (
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pbagent "trellis.dev/trellis/api/agent/v1"
)

// A forwarded heartbeat's result travels as the whole google.rpc.Status
// the leader would have answered it with, so a refusal reaches the agent
// through a follower with its code, message and ErrorInfo intact.

// encodeResult is the wire form of one heartbeat's answer.
func encodeResult(resp *pbagent.HeartbeatResponse, err error) *pbagent.HeartbeatResult {
	if err == nil {
		return &pbagent.HeartbeatResult{Response: resp}
	}
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.Newf(codes.Internal, "encoding the answer to a heartbeat: %v", merr).Proto())
	}
	return &pbagent.HeartbeatResult{Status: b}
}

// decodeResult reads one heartbeat's answer back.
func decodeResult(r *pbagent.HeartbeatResult) (*pbagent.HeartbeatResponse, error) {
	var st spb.Status
	if err := proto.Unmarshal(r.GetStatus(), &st); err != nil {
		return nil, status.Errorf(codes.Internal, "the leader's answer to this heartbeat is unreadable: %v", err)
	}
	if codes.Code(st.GetCode()) != codes.OK {
		return nil, status.FromProto(&st).Err()
	}
	if r.GetResponse() == nil {
		return nil, status.Error(codes.Internal, "the leader took this heartbeat but sent no response")
	}
	return r.GetResponse(), nil
}
