package camodule

import (
	"context"
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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
// ca.ReasonNotAllowed; the method's permission stays the floor.
// SignIntermediate is a secondary datacenter's leader calling the
// primary's public port (the server-to-server port takes only servers of
// its own cluster's server CA, which a secondary's servers do not hold):
// server, the strongest permission there is. With ACLs off every caller
// has it; the ACL issue gives secondaries a token for it (Consul's
// replication token), and until then an operator who exposes a primary's
// public port to untrusted networks exposes this method too.
var servicePermissions = map[string]acl.Permission{
	"Sign":             acl.Agent,
	"SignIntermediate": acl.Server,
}

// caService is the gRPC face of the signer, on every server's public
// port.
type caService struct {
	pbca.UnimplementedCAServiceServer
	signer *Signer
	// secondaryOf is the primary's datacenter on a server of a secondary
	// datacenter, "" on the primary's.
	secondaryOf string
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

// SignIntermediate signs a secondary datacenter's intermediate CA. A
// refused CSR is InvalidArgument naming the field; on a server of a
// secondary it is FailedPrecondition: only the primary signs
// intermediates, and a secondary pointed at another secondary must say so
// rather than chain under it.
func (s caService) SignIntermediate(ctx context.Context, req *pbca.SignIntermediateRequest) (*pbca.SignIntermediateResponse, error) {
	if s.secondaryOf != "" {
		return nil, status.Errorf(codes.FailedPrecondition,
			"this server is in datacenter %q, a secondary of %q: only the primary datacenter's servers sign intermediates (give a server of %q as -primary-address)",
			s.signer.Datacenter(), s.secondaryOf, s.secondaryOf)
	}
	inter, err := s.signer.SignIntermediate(ctx, []byte(req.GetCsrPem()), req.GetDatacenter())
	if err != nil {
		return nil, err
	}
	return &pbca.SignIntermediateResponse{CertPem: inter.CertPEM, ChainPem: inter.ChainPEM}, nil
}
