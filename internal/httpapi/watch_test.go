package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/storage/inmem"
)

const nsList = "/v1/resources/core/v1/Namespace"

func TestWatchStream(t *testing.T) {
	e := newEnv(t, options{})
	s := e.watch(nsList + "?watch=1")

	// The snapshot: what is stored now, then its end.
	ev := s.next()
	if ev.Op != wire.OpUpsert || ev.Resource.ID.Name != "default" || ev.Index == 0 {
		t.Fatalf("snapshot event %+v", ev)
	}
	end := s.next()
	if end.Op != wire.OpEndOfSnapshot || end.Resource != nil || end.Index < ev.Index {
		t.Fatalf("end of snapshot %+v", end)
	}

	// Then each change, as it happens (each line is flushed: next blocks
	// until it arrives).
	mustStatus(t, e.do(http.MethodPut, nsPath+"a", `{"data":{"description":"x"}}`), http.StatusOK)
	up := s.next()
	if up.Op != wire.OpUpsert || up.Resource.ID.Name != "a" || string(up.Resource.Data) != `{"description":"x"}` || up.Index <= end.Index {
		t.Fatalf("upsert %+v", up)
	}
	mustStatus(t, e.do(http.MethodDelete, nsPath+"a", ""), http.StatusOK)
	del := s.next()
	if del.Op != wire.OpDelete || del.Resource.ID.Name != "a" || del.Index <= up.Index {
		t.Fatalf("delete %+v", del)
	}

	// A watch the server ends says so in a last line.
	e.handler.Shutdown()
	last := s.next()
	if last.Op != wire.OpError || last.Code != wire.CodeUnavailable || !strings.Contains(last.Error, "watch again") || last.Index != del.Index {
		t.Fatalf("last line %+v", last)
	}
	if !s.ended() {
		t.Fatal("stream not ended after the error line")
	}
}

func TestWatchResume(t *testing.T) {
	e := newEnv(t, options{})
	s := e.watch(nsList + "?watch=1")
	s.next()
	s.next()
	mustStatus(t, e.do(http.MethodPut, nsPath+"a", `{}`), http.StatusOK)
	seen := s.next()
	// Changes made while no one watches...
	mustStatus(t, e.do(http.MethodPut, nsPath+"b", `{}`), http.StatusOK)
	mustStatus(t, e.do(http.MethodDelete, nsPath+"a", ""), http.StatusOK)

	// ...are replayed by a watch resumed after the last index seen, with
	// no snapshot of what was already there.
	r := e.watch(fmt.Sprintf("%s?watch=1&index=%d", nsList, seen.Index))
	var got []string
	for {
		ev := r.next()
		if ev.Op == wire.OpEndOfSnapshot {
			break
		}
		got = append(got, ev.Op+" "+ev.Resource.ID.Name)
	}
	if fmt.Sprint(got) != "[upsert b delete a]" {
		t.Fatalf("resumed watch replayed %v", got)
	}
}

func TestWatchFiltersAndTooOld(t *testing.T) {
	e := newEnv(t, options{storeOpts: []inmem.Option{inmem.WithEventHistory(2)}})
	const probes = "/v1/resources/test/v1/Probe"
	mustStatus(t, e.do(http.MethodPut, nsPath+"prod", `{}`), http.StatusOK)
	s := e.watch(probes + "?watch=1&namespace=prod&prefix=web-")
	if ev := s.next(); ev.Op != wire.OpEndOfSnapshot {
		t.Fatalf("empty snapshot: %+v", ev)
	}
	mustStatus(t, e.do(http.MethodPut, probes+"/db-1?namespace=prod", `{}`), http.StatusOK)
	mustStatus(t, e.do(http.MethodPut, probes+"/web-1", `{}`), http.StatusOK)
	mustStatus(t, e.do(http.MethodPut, probes+"/web-1?namespace=prod", `{}`), http.StatusOK)
	if ev := s.next(); ev.Resource.ID.Name != "web-1" || ev.Resource.ID.Tenancy.Namespace != "prod" {
		t.Fatalf("filtered watch got %+v", ev.Resource.ID)
	}

	// Resuming from an index whose events are gone is refused before the
	// stream starts: list again.
	r := e.do(http.MethodGet, probes+"?watch=1&index=1", "")
	mustStatus(t, r, http.StatusGone)
	if er := r.apiError(t); er.Code != wire.CodeGone {
		t.Fatalf("too old: %+v", er)
	}
}
