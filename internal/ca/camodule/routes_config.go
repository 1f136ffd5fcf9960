package camodule

import (
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/resource"
)

// putConfig changes the CA's configuration. A supplied root's private_key
// is stored sealed, as the CASigningKey of that root, in the same batch as
// the configuration, which never holds it; the CA manager then rotates to
// the root. No answer, log or error quotes the key.
func (h routes) putConfig(w http.ResponseWriter, r *http.Request) error {
	if _, err := httpapi.Params(r); err != nil {
		return err
	}
	var body ConfigRequest
	if err := httpapi.DecodeJSON(r, &body); err != nil {
		return err
	}
	if len(body.Config) == 0 || string(body.Config) == "null" {
		return httpapi.InputError("config", "missing: give the settings to change, as GET /v1/ca/config shows them ({\"config\": {\"leaf_ttl\": \"24h\"}})")
	}
	ctx := r.Context()
	stored := &pbca.CAConfig{}
	version := resource.CreateOnly
	resp, err := h.api.Read(ctx, &pbresource.ReadRequest{Id: ca.ConfigID(), Consistent: true})
	switch {
	case err == nil:
		if stored, err = resource.DecodeData[*pbca.CAConfig](resp.GetResource()); err != nil {
			return err
		}
		version = resp.GetResource().GetVersion()
	case status.Code(err) == codes.NotFound:
		ca.FillConfigDefaults(stored)
	default:
		return err
	}
	if body.Version != "" && body.Version != version {
		return status.Errorf(codes.Aborted, "version: the configuration is at version %s, not %s: read it again and apply the change to it", version, body.Version)
	}
	if h.secondaryOf != "" {
		if err := checkSecondaryConfigChange(stored, body.Config, h.secondaryOf); err != nil {
			return err
		}
	}
	active, err := h.activeRoot(r)
	if err != nil {
		return err
	}
	change, err := planConfigChange(stored, body.Config, active, h.clock())
	if err != nil {
		return err
	}
	cfgData, err := anypb.New(change.config)
	if err != nil {
		return err
	}
	batch := []*pbresource.Resource{{Id: ca.ConfigID(), Version: version, Data: cfgData}}
	if change.keyPEM != "" {
		keyData, err := anypb.New(&pbca.CASigningKey{RootId: change.rootID, PrivateKey: change.keyPEM, SigningCert: change.rootCert})
		if err != nil {
			return err
		}
		batch = append(batch, &pbresource.Resource{Id: ca.SigningKeyID(ca.RootName(change.rootID)), Data: keyData})
	}
	// FromOperations: the configuration is written only through this
	// route, and the key is sealed; the caller's operator:write was
	// checked before the handler ran, and the resource service checks its
	// token again.
	written, err := h.api.WriteBatch(resource.FromOperations(ctx), &pbresource.WriteBatchRequest{Resources: batch})
	if err != nil {
		if status.Code(err) == codes.Aborted {
			return status.Errorf(codes.Aborted, "version: the configuration changed while this change was made: read it again and apply the change to it")
		}
		return err
	}
	out, err := configBody(written.GetResources()[0])
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
	return nil
}

// activeRoot is the active CARoot, or nil when there is none yet.
func (h routes) activeRoot(r *http.Request) (*pbca.CARoot, error) {
	list, err := h.api.List(r.Context(), &pbresource.ListRequest{Type: ca.RootType, Tenancy: &pbresource.Tenancy{}, Consistent: true})
	if err != nil {
		return nil, err
	}
	roots, err := decodeRoots(list.GetResources())
	if err != nil {
		return nil, err
	}
	if a := activeRoot(roots); a != nil {
		return a.root, nil
	}
	return nil, nil
}
