package camodule

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbca "trellis.dev/trellis/api/ca/v1"
	"trellis.dev/trellis/internal/acl"
)

// RetryAfterKey is the trailer a ResourceExhausted answer of Sign carries:
// the seconds to wait before retrying, as HTTP's Retry-After.
const RetryAfterKey = "retry-after"

// servicePermissions is what each CAService method needs. Sign is what
// agents call, for their own agent id and for the services of the tasks
// they run, so it needs agent. When ACLs land, the signer will also
// check the identity asked for against the caller's token (a service id:
// namespace:write on its namespace; an agent id: agent) and refuse with
// ca.ReasonNotAllowed; the method's permission stays the floor. What
// servers ask of each other (a secondary's intermediate) is another
// service, CAFederation, on the server-to-server port only
// (federation.go).
var servicePermissions = map[string]acl.Permission{
	"Sign": acl.Agent,
}

// caService is the gRPC face of the signer, on every server's public
// port.
type caService struct {
	pbca.UnimplementedCAServiceServer
	signer *Signer
}

// Sign signs a leaf. A refused CSR is InvalidArgument naming the field;
// over the limit it is ResourceExhausted with a retry-after trailer;
// before the CA has a root, Unavailable.
func (s caService) Sign(ctx context.Context, req *pbca.SignRequest) (*pbca.SignResponse, error) {
	leaf, err := s.signer.Sign(ctx, []byte(req.GetCsrPem()))
	if err != nil {
		var rl *RateLimitedError
		if errors.As(err, &rl) {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(RetryAfterKey, rl.RetryAfterSeconds()))
		}
		return nil, err
	}
	return &pbca.SignResponse{
		CertPem: leaf.CertPEM, ChainPem: leaf.ChainPEM, Serial: leaf.Serial,
		NotAfter: timestamppb.New(leaf.NotAfter),
	}, nil
}
