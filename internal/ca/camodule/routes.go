package camodule

import (
	"net/http"
	"sort"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pbca "trellis.dev/trellis/api/ca/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/ca"
	"trellis.dev/trellis/internal/core"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/resource"
)

// The CA's routes; docs/ca.md is their contract. Roots are public: a
// root is what every peer must trust and holds no secret, and a client
// needs them before it holds any credential. The configuration is an
// operator's to read and to write.

type routes struct {
	api        resource.API
	now        func() time.Time // time.Now when nil
	datacenter string           // the server's, in RootsBody
	// secondaryOf is the primary's datacenter in a secondary, "" in the
	// primary.
	secondaryOf string
}

func (h routes) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

func (h routes) table() []httpapi.Route {
	return []httpapi.Route{
		{Pattern: "GET /v1/ca/roots", Permission: acl.Public, Handler: h.roots},
		{Pattern: "/v1/ca/roots", Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET")},
		{Pattern: "GET /v1/ca/config", Permission: acl.OperatorRead, Handler: h.config},
		{Pattern: "PUT /v1/ca/config", Permission: acl.OperatorWrite, Handler: h.putConfig},
		{Pattern: "/v1/ca/config", Permission: acl.Public, Handler: httpapi.MethodNotAllowed("GET, PUT")},
	}
}

func (h routes) roots(w http.ResponseWriter, r *http.Request) error {
	index, wait, err := blockingParams(r)
	if err != nil {
		return err
	}
	if index > 0 {
		if err := h.waitForRoots(r, index, wait); err != nil {
			return err
		}
	}
	list, at, err := h.snapshotRoots(r)
	if err != nil {
		return err
	}
	body, err := rootsBody(list)
	if err != nil {
		return err
	}
	body.Datacenter = h.datacenter
	if body.TrustDomain == "" && h.secondaryOf == "" {
		// No root yet (the manager has not run): the trust domain is
		// still the cluster's, when the caller may read its id. A
		// secondary's is the primary's, unknown until it has its roots.
		if id, err := core.ClusterID(r.Context(), h.api); err == nil {
			body.TrustDomain = ca.TrustDomain(id)
		}
	}
	w.Header().Set(IndexHeader, strconv.FormatUint(at, 10))
	httpapi.WriteJSON(w, http.StatusOK, body)
	return nil
}

// rootsBody renders stored roots, the active one first, then the newest.
func rootsBody(list []*pbresource.Resource) (RootsBody, error) {
	out := RootsBody{Roots: []RootBody{}}
	for _, res := range list {
		root, err := resource.DecodeData[*pbca.CARoot](res)
		if err != nil {
			return RootsBody{}, err
		}
		b := RootBody{
			ID: root.GetId(), Name: res.GetId().GetName(), RootCert: root.GetRootCert(),
			IntermediateCerts: append([]string{}, root.GetIntermediateCerts()...),
			Active:            root.GetActive(),
			RotatedOutAt:      timeOf(root.GetRotatedOutAt().IsValid(), root.GetRotatedOutAt().AsTime()),
			NotAfter:          timeOf(root.GetNotAfter().IsValid(), root.GetNotAfter().AsTime()),
		}
		if b.Active {
			out.ActiveRootID, out.TrustDomain = b.ID, root.GetTrustDomain()
		} else if out.TrustDomain == "" {
			out.TrustDomain = root.GetTrustDomain()
		}
		out.Roots = append(out.Roots, b)
	}
	sort.SliceStable(out.Roots, func(i, j int) bool {
		a, b := out.Roots[i], out.Roots[j]
		if a.Active != b.Active {
			return a.Active
		}
		return a.NotAfter != nil && b.NotAfter != nil && a.NotAfter.After(*b.NotAfter)
	})
	return out, nil
}

func timeOf(ok bool, t time.Time) *time.Time {
	if !ok {
		return nil
	}
	t = t.UTC()
	return &t
}

func (h routes) config(w http.ResponseWriter, r *http.Request) error {
	resp, err := h.api.Read(r.Context(), &pbresource.ReadRequest{Id: ca.ConfigID()})
	if err != nil {
		return err
	}
	body, err := configBody(resp.GetResource())
	if err != nil {
		return err
	}
	httpapi.WriteJSON(w, http.StatusOK, body)
	return nil
}

var jsonOptions = protojson.MarshalOptions{UseProtoNames: true}

func configBody(res *pbresource.Resource) (ConfigBody, error) {
	c, err := resource.DecodeData[*pbca.CAConfig](res)
	if err != nil {
		return ConfigBody{}, err
	}
	// A stored CAConfig never holds a key (ValidateConfig refuses one);
	// cleared all the same, so that no future path can leak one here.
	c.PrivateKey = ""
	cfg, err := jsonOptions.Marshal(c)
	if err != nil {
		return ConfigBody{}, err
	}
	out := ConfigBody{Version: res.GetVersion(), Config: cfg}
	if st := res.GetStatus()[ca.ManagerStatusKey]; st != nil {
		var m pbca.CAManagerStatus
		if err := st.GetData().UnmarshalTo(&m); err == nil {
			if out.Manager, err = jsonOptions.Marshal(&m); err != nil {
				return ConfigBody{}, err
			}
		}
	}
	return out, nil
}
