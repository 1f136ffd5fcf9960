package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/httpapi/wire"
)

// errShuttingDown ends the watches open when the server stops.
var errShuttingDown = errors.New("the server is shutting down: watch again from the last index seen")

// watch streams a WatchList as newline-delimited JSON, one event per line,
// flushed as it comes. Errors before the first byte are ordinary JSON error
// responses; once streaming, a watch the server cuts off (fell behind,
// shutting down) ends with one {"op":"error",...} line, so a client can tell
// an end from a dropped connection; its index is the last one sent, to
// resume after. A client that leaves just ends it.
func (h *Handler) watch(w http.ResponseWriter, r *http.Request, req *pbresource.WatchListRequest) error {
	if rec, ok := w.(*recorder); ok {
		rec.route = "WATCH /v1/resources/{group}/{version}/{kind}"
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	stopAfter := context.AfterFunc(h.stopping, func() { cancel(errShuttingDown) })
	defer stopAfter()

	watch, err := h.api.Watch(ctx, req)
	if err != nil {
		return err
	}
	defer watch.Close()
	h.metrics.watches.Inc()
	defer h.metrics.watches.Dec()

	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	flusher := http.NewResponseController(w)
	if err := flusher.Flush(); err != nil {
		return nil // the client is gone
	}

	enc := json.NewEncoder(w)
	last := req.GetSinceIndex()
	for {
		ev, err := watch.Next(ctx)
		if err != nil {
			if r.Context().Err() != nil {
				return nil // the client left: nobody to tell
			}
			if cause := context.Cause(ctx); errors.Is(cause, errShuttingDown) {
				err = cause
			}
			_, body := httpError(err)
			if errors.Is(err, errShuttingDown) {
				body.Code = wire.CodeUnavailable
			}
			_ = enc.Encode(wire.Event{Op: wire.OpError, Error: body.Error, Code: body.Code, Index: last})
			_ = flusher.Flush()
			return nil
		}
		last = max(last, ev.GetIndex())
		if err := enc.Encode(h.eventToWire(ev)); err != nil {
			return nil
		}
		if err := flusher.Flush(); err != nil {
			return nil
		}
	}
}

func (h *Handler) eventToWire(ev *pbresource.WatchEvent) wire.Event {
	out := wire.Event{Index: ev.GetIndex()}
	switch ev.GetOp() {
	case pbresource.WatchEvent_OP_UPSERT:
		out.Op = wire.OpUpsert
	case pbresource.WatchEvent_OP_DELETE:
		out.Op = wire.OpDelete
	case pbresource.WatchEvent_OP_END_OF_SNAPSHOT:
		out.Op = wire.OpEndOfSnapshot
	default:
		out.Op = ev.GetOp().String()
	}
	if ev.GetResource() != nil {
		out.Resource = toWire(h.reg, ev.GetResource())
	}
	return out
}
