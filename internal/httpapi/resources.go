package httpapi

import (
	"fmt"
	"net/http"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// idFromRequest resolves the type, tenancy and name a single-resource path
// names.
func (h *Handler) idFromRequest(r *http.Request, q query) (*pbresource.ID, error) {
	typ, regn, err := typeFromPath(h.reg, r)
	if err != nil {
		return nil, err
	}
	ten, err := tenancyFor(regn, q.namespace, false, "namespace")
	if err != nil {
		return nil, err
	}
	return &pbresource.ID{Type: typ, Tenancy: ten, Name: r.PathValue("name")}, nil
}

func (h *Handler) read(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.Query(), "namespace", "consistent", "stale")
	if err != nil {
		return err
	}
	id, err := h.idFromRequest(r, q)
	if err != nil {
		return err
	}
	resp, err := h.api.Read(q.ctx(r), &pbresource.ReadRequest{Id: id, Consistent: q.consistent})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toWire(h.reg, resp.GetResource()))
	return nil
}

func (h *Handler) write(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.Query(), "namespace")
	if err != nil {
		return err
	}
	id, err := h.idFromRequest(r, q)
	if err != nil {
		return err
	}
	var body writeBody
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, h.maxBody), &body); err != nil {
		return err
	}
	if err := checkVersion("version", body.Version); err != nil {
		return err
	}
	if body.ID != nil {
		if err := checkBodyID(body.ID, id); err != nil {
			return err
		}
		id.Uid = body.ID.UID
	}
	regn, _ := h.reg.Resolve(id.GetType())
	data, err := decodeData(regn, body.Data, "data")
	if err != nil {
		return err
	}
	res := &pbresource.Resource{
		Id:       id,
		Owner:    idFromWire(body.Owner),
		Version:  body.Version,
		Metadata: body.Metadata,
		Data:     data,
	}
	resp, err := h.api.Write(r.Context(), &pbresource.WriteRequest{Resource: res})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toWire(h.reg, resp.GetResource()))
	return nil
}

// checkBodyID refuses a body whose id names another resource than the
// path: putting a fetched resource back under another name must be said in
// the path, not half in the body.
func checkBodyID(body *wire.ID, path *pbresource.ID) error {
	check := func(field, got, want string) error {
		if got != "" && got != want {
			return inputError("id."+field, "%q does not match the path's %q", got, want)
		}
		return nil
	}
	for _, c := range [][3]string{
		{"name", body.Name, path.GetName()},
		{"type.group", body.Type.Group, path.GetType().GetGroup()},
		{"type.group_version", body.Type.GroupVersion, path.GetType().GetGroupVersion()},
		{"type.kind", body.Type.Kind, path.GetType().GetKind()},
		{"tenancy.namespace", body.Tenancy.Namespace, path.GetTenancy().GetNamespace()},
	} {
		if err := check(c[0], c[1], c[2]); err != nil {
			return err
		}
	}
	return nil
}

func (h *Handler) delete(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.Query(), "namespace", "version")
	if err != nil {
		return err
	}
	if err := checkVersion("version", q.version); err != nil {
		return err
	}
	id, err := h.idFromRequest(r, q)
	if err != nil {
		return err
	}
	if _, err := h.api.Delete(r.Context(), &pbresource.DeleteRequest{Id: id, Version: q.version}); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r.URL.Query(), "namespace", "prefix", "consistent", "stale", "watch", "index")
	if err != nil {
		return err
	}
	typ, regn, err := typeFromPath(h.reg, r)
	if err != nil {
		return err
	}
	ten, err := tenancyFor(regn, q.namespace, true, "namespace")
	if err != nil {
		return err
	}
	if q.watch {
		return h.watch(w, r.WithContext(q.ctx(r)), &pbresource.WatchListRequest{Type: typ, Tenancy: ten, NamePrefix: q.prefix, SinceIndex: q.index})
	}
	if q.index != 0 {
		return inputError("index", "only a watch (watch=1) resumes from an index")
	}
	resp, err := h.api.List(q.ctx(r), &pbresource.ListRequest{Type: typ, Tenancy: ten, NamePrefix: q.prefix, Consistent: q.consistent})
	if err != nil {
		return err
	}
	h.writeList(w, resp.GetResources())
	return nil
}

func (h *Handler) batch(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r.URL.Query()); err != nil {
		return err
	}
	var body wire.BatchRequest
	if err := decodeJSON(http.MaxBytesReader(w, r.Body, h.maxBatch), &body); err != nil {
		return err
	}
	if len(body.Resources) == 0 {
		return inputError("resources", "empty: give at least one resource")
	}
	resources := make([]*pbresource.Resource, len(body.Resources))
	for i, doc := range body.Resources {
		res, err := h.fromDocument(doc, fmt.Sprintf("resources[%d]", i))
		if err != nil {
			return err
		}
		resources[i] = res
	}
	compares := make([]*pbresource.Compare, len(body.Compares))
	for i, c := range body.Compares {
		pc, err := h.fromCompare(c, fmt.Sprintf("compares[%d]", i))
		if err != nil {
			return err
		}
		compares[i] = pc
	}
	resp, err := h.api.WriteBatch(r.Context(), &pbresource.WriteBatchRequest{Resources: resources, Compares: compares})
	if err != nil {
		return err
	}
	h.writeList(w, resp.GetResources())
	return nil
}

// compareOps maps the wire's compare ops to the API's.
var compareOps = map[string]pbresource.Compare_Op{
	wire.CompareVersion:      pbresource.Compare_OP_VERSION,
	wire.CompareAbsent:       pbresource.Compare_OP_ABSENT,
	wire.CompareExists:       pbresource.Compare_OP_EXISTS,
	wire.CompareNothingNewer: pbresource.Compare_OP_NOTHING_NEWER,
}

// fromCompare converts one compare of a batch, naming it by path in
// errors; the resource service checks the rest.
func (h *Handler) fromCompare(c wire.Compare, path string) (*pbresource.Compare, error) {
	op, ok := compareOps[c.Op]
	if !ok {
		return nil, inputError(path+".op", "%q is not a compare: give version, absent, exists or nothing_newer", c.Op)
	}
	t, err := wire.ParseType(c.Type)
	if err != nil {
		return nil, inputError(path+".type", "%q is not group/version/kind (for example core/v1/Namespace)", c.Type)
	}
	typ, regn, err := resolveType(h.reg, typeFromWire(t), path+".type")
	if err != nil {
		return nil, err
	}
	ten, err := tenancyFor(regn, c.Namespace, false, path+".namespace")
	if err != nil {
		return nil, err
	}
	return &pbresource.Compare{Op: op, Id: &pbresource.ID{Type: typ, Tenancy: ten, Name: c.Name, Uid: c.UID}, Version: c.Version}, nil
}

// writeList answers with resources in the list shape that list and batch
// share.
func (h *Handler) writeList(w http.ResponseWriter, resources []*pbresource.Resource) {
	out := wire.ListResponse{Resources: make([]*wire.Resource, len(resources))}
	for i, res := range resources {
		out.Resources[i] = toWire(h.reg, res)
	}
	writeJSON(w, http.StatusOK, out)
}

// fromDocument converts one batch member, naming it by path in errors.
func (h *Handler) fromDocument(doc wire.Document, path string) (*pbresource.Resource, error) {
	t, err := wire.ParseType(doc.Type)
	if err != nil {
		return nil, inputError(path+".type", "%q is not group/version/kind (for example core/v1/Namespace)", doc.Type)
	}
	typ, regn, err := resolveType(h.reg, typeFromWire(t), path+".type")
	if err != nil {
		return nil, err
	}
	if doc.Name == "" {
		return nil, inputError(path+".name", "missing")
	}
	if err := checkVersion(path+".version", doc.Version); err != nil {
		return nil, err
	}
	ten, err := tenancyFor(regn, doc.Namespace, false, path+".namespace")
	if err != nil {
		return nil, err
	}
	data, err := decodeData(regn, doc.Data, path+".data")
	if err != nil {
		return nil, err
	}
	return &pbresource.Resource{
		Id:       &pbresource.ID{Type: typ, Tenancy: ten, Name: doc.Name},
		Owner:    idFromWire(doc.Owner),
		Version:  doc.Version,
		Metadata: doc.Metadata,
		Data:     data,
	}, nil
}
