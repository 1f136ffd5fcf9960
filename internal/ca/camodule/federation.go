package camodule

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/resource"
)

// federationPermissions is what each CAFederation method needs: server,
// the strongest permission there is. The service is served on the
// server-to-server port only (module.Parts.ServerServices), whose TLS
// takes nothing but servers of the federation's cluster CA; it is the one
// service of that port served to the servers of other datacenters
// (AllDatacenters), and SignIntermediate checks that its caller is a
// server of the datacenter it asks for.
var federationPermissions = map[string]acl.Permission{
	"Roots":            acl.Server,
	"SignIntermediate": acl.Server,
}

// federationService is the CAFederation of the server-to-server port:
// what a secondary datacenter's leader asks of the primary's servers.
type federationService struct {
	pbca.UnimplementedCAFederationServer
	api    resource.API
	signer *Signer
	// secondaryOf is the primary's datacenter on a server of a secondary
	// datacenter, "" on the primary's.
	secondaryOf string
}

// notPrimary is the answer of a secondary's server: only the primary's
// servers answer the federation, and a secondary pointed at another
// secondary must say so rather than chain under it.
func (s federationService) notPrimary() error {
	return status.Errorf(codes.FailedPrecondition,
		"this server is in datacenter %q, a secondary of %q: only the primary datacenter's servers sign intermediates (give the server-to-server address of a server of %q as -primary-address)",
		s.signer.Datacenter(), s.secondaryOf, s.secondaryOf)
}

// Roots lists this datacenter's roots, as the leader has them.
func (s federationService) Roots(ctx context.Context, _ *pbca.FederationRootsRequest) (*pbca.FederationRootsResponse, error) {
	if s.secondaryOf != "" {
		return nil, s.notPrimary()
	}
	resp, err := s.api.List(ctx, &pbresource.ListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}, Consistent: true})
	if err != nil {
		return nil, err
	}
	out := &pbca.FederationRootsResponse{Roots: make([]*pbca.CARoot, 0, len(resp.GetResources()))}
	for _, res := range resp.GetResources() {
		r, err := resource.DecodeData[*pbca.CARoot](res)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "the root %s does not decode: %v", res.GetId().GetName(), err)
		}
		out.Roots = append(out.Roots, r)
	}
	return out, nil
}

// SignIntermediate signs a secondary datacenter's intermediate CA, for a
// server of that datacenter only (PermissionDenied otherwise). A refused
// CSR is InvalidArgument naming the field; on a server of a secondary it
// is FailedPrecondition.
func (s federationService) SignIntermediate(ctx context.Context, req *pbca.SignIntermediateRequest) (*pbca.SignIntermediateResponse, error) {
	if s.secondaryOf != "" {
		return nil, s.notPrimary()
	}
	caller, ok := module.ServerCallerFrom(ctx)
	if !ok {
		return nil, status.Error(codes.PermissionDenied, "permission denied: an intermediate is signed only for a call of the server-to-server port")
	}
	if err := ca.CheckIntermediateCaller(caller.Datacenter, caller.Plaintext(), req.GetDatacenter()); err != nil {
		if errors.Is(err, ca.ErrNotServerOfDatacenter) {
			s.signer.log.Warn("CA signer: refused an intermediate to a server of another datacenter", "asked_for", req.GetDatacenter(), "caller_datacenter", caller.Datacenter)
			return nil, status.Errorf(codes.PermissionDenied, "permission denied: %v", err)
		}
		return nil, err
	}
	inter, err := s.signer.SignIntermediate(ctx, []byte(req.GetCsrPem()), req.GetDatacenter())
	if err != nil {
		return nil, err
	}
	return &pbca.SignIntermediateResponse{CertPem: inter.CertPEM, ChainPem: inter.ChainPEM}, nil
}
