package reaper_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/controller"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/resource/reaper"
	"trellis.dev/trellis/internal/storage/inmem"
)

// Owners and owned of several types and both scopes.
var (
	thingType = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Thing"}
	partType  = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Part"}
	bitType   = &pbresource.Type{Group: "test", GroupVersion: "v1", Kind: "Bit"} // cluster-scoped
)

type leadership chan bool

func (l leadership) LeaderCh() <-chan bool { return l }

type harness struct {
	t      *testing.T
	ctx    context.Context
	svc    *resource.Service
	reg    *resource.Registry
	leader chan bool
}

// newHarness starts a Manager running only the reaper, over the real
// resource service, not yet leader. Call it inside a synctest bubble.
func newHarness(t *testing.T) *harness {
	h := &harness{t: t, ctx: t.Context(), reg: resource.NewRegistry(), leader: make(chan bool)}
	h.reg.Register(resource.Registration{Type: thingType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
	h.reg.Register(resource.Registration{Type: partType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeNamespace})
	h.reg.Register(resource.Registration{Type: bitType, Proto: &wrapperspb.StringValue{}, Scope: resource.ScopeCluster})
	h.svc = resource.NewService(resource.Config{Backend: inmem.NewBackend(), Registry: h.reg})
	mgr, err := controller.NewManager(controller.Config{Client: h.svc, Leadership: leadership(h.leader)})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Register(reaper.Controller(h.svc, h.reg)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	return h
}

func (h *harness) setLeader(b bool) {
	h.leader <- b
	synctest.Wait()
}

func id(typ *pbresource.Type, name string) *pbresource.ID {
	ns := "default"
	if typ == bitType {
		ns = ""
	}
	return &pbresource.ID{Type: typ, Tenancy: &pbresource.Tenancy{Namespace: ns}, Name: name}
}

func (h *harness) write(typ *pbresource.Type, name string, owner *pbresource.Resource) *pbresource.Resource {
	h.t.Helper()
	data, err := anypb.New(wrapperspb.String(name))
	if err != nil {
		h.t.Fatal(err)
	}
	res := &pbresource.Resource{Id: id(typ, name), Data: data}
	if owner != nil {
		res.Owner = owner.GetId()
	}
	resp, err := h.svc.Write(h.ctx, &pbresource.WriteRequest{Resource: res})
	if err != nil {
		h.t.Fatalf("write %s: %v", name, err)
	}
	return resp.GetResource()
}

func (h *harness) delete(typ *pbresource.Type, name string) {
	h.t.Helper()
	if _, err := h.svc.Delete(h.ctx, &pbresource.DeleteRequest{Id: id(typ, name)}); err != nil {
		h.t.Fatalf("delete %s: %v", name, err)
	}
}

// stored returns the uid stored under a name, or "" when nothing is.
func (h *harness) stored(typ *pbresource.Type, name string) string {
	h.t.Helper()
	resp, err := h.svc.Read(h.ctx, &pbresource.ReadRequest{Id: id(typ, name)})
	if status.Code(err) == codes.NotFound {
		return ""
	}
	if err != nil {
		h.t.Fatalf("read %s: %v", name, err)
	}
	return resp.GetResource().GetId().GetUid()
}

// expectStored checks which of the named resources are stored. A name's
// first letter gives its type: t Thing, p Part, b Bit.
func (h *harness) expectStored(want map[string]bool) {
	h.t.Helper()
	types := map[byte]*pbresource.Type{'t': thingType, 'p': partType, 'b': bitType}
	for name, present := range want {
		if got := h.stored(types[name[0]], name) != ""; got != present {
			h.t.Errorf("%s stored = %v, want %v", name, got, present)
		}
	}
}

func TestReaperDeletesOwnedTransitively(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		t1 := h.write(thingType, "t1", nil)
		p1 := h.write(partType, "p1", t1)
		h.write(bitType, "b1", p1)
		b2 := h.write(bitType, "b2", p1)
		h.write(partType, "p1deep", b2) // a bit owning a part: any type may own any other
		t2 := h.write(thingType, "t2", nil)
		p2 := h.write(partType, "p2", t2)
		h.write(bitType, "b3", p2)
		h.write(bitType, "bfree", nil)
		h.setLeader(true)

		all := map[string]bool{"t1": true, "p1": true, "b1": true, "b2": true, "p1deep": true, "t2": true, "p2": true, "b3": true, "bfree": true}
		h.expectStored(all) // every owner exists: nothing is reaped

		h.delete(thingType, "t1")
		synctest.Wait()
		h.expectStored(map[string]bool{
			"t1": false, "p1": false, "b1": false, "b2": false, "p1deep": false,
			"t2": true, "p2": true, "b3": true, "bfree": true,
		})

		h.delete(partType, "p2") // the middle of a chain: its owner is left alone
		synctest.Wait()
		h.expectStored(map[string]bool{"t2": true, "p2": false, "b3": false, "bfree": true})
	})
}

func TestReaperTellsIncarnationsApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.setLeader(true)
		old := h.write(thingType, "t", nil)
		h.write(partType, "pold", old)
		synctest.Wait()

		// Deleted and re-created before the reaper runs: the name is taken
		// again, by another incarnation.
		h.delete(thingType, "t")
		cur := h.write(thingType, "t", nil)
		h.write(partType, "pcur", cur)
		synctest.Wait()
		if h.stored(thingType, "t") != cur.GetId().GetUid() {
			t.Fatal("the new incarnation of t is not stored")
		}
		h.expectStored(map[string]bool{"pold": false, "pcur": true})

		// A resource written with an owner incarnation that is gone is
		// reaped as soon as it is written.
		h.write(partType, "plate", old)
		synctest.Wait()
		h.expectStored(map[string]bool{"plate": false, "pcur": true})
	})
}

func TestReaperCatchesUpOnGainingLeadership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		// Orphaned before any leader ran the reaper.
		gone := h.write(thingType, "tgone", nil)
		h.write(partType, "porphan", gone)
		h.delete(thingType, "tgone")
		keep := h.write(thingType, "tkeep", nil)
		h.write(partType, "pkeep", keep)
		synctest.Wait()
		h.expectStored(map[string]bool{"porphan": true}) // no leader, no reaping

		h.setLeader(true)
		h.expectStored(map[string]bool{"porphan": false, "tkeep": true, "pkeep": true})

		// Orphaned while another server led (this one did not).
		h.setLeader(false)
		h.delete(thingType, "tkeep")
		synctest.Wait()
		h.expectStored(map[string]bool{"pkeep": true})
		h.setLeader(true)
		h.expectStored(map[string]bool{"pkeep": false})
	})
}

func TestReaperDoesNotGuessAboutUnknownOwnerTypes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		r := &reaper.Reconciler{Client: h.svc, Registry: h.reg}
		unknown := &pbresource.ID{
			Type:    &pbresource.Type{Group: "gone", GroupVersion: "v1", Kind: "Plugin"},
			Tenancy: &pbresource.Tenancy{Namespace: "default"},
			Name:    "p",
			Uid:     "01J00000000000000000000000",
		}
		err := r.Reconcile(h.ctx, controller.Request{ID: unknown})
		var term *controller.TerminalError
		if !errors.As(err, &term) || !errors.Is(err, reaper.ErrOwnerTypeUnknown) {
			t.Errorf("Reconcile = %v, want a terminal ErrOwnerTypeUnknown", err)
		}
	})
}

func TestMap(t *testing.T) {
	owner := id(thingType, "o")
	owner.Uid = "01J00000000000000000000001"
	self := id(partType, "p")
	self.Uid = "01J00000000000000000000002"
	cases := []struct {
		name string
		ev   controller.Event
		want *pbresource.ID
	}{
		{"written with an owner: that owner incarnation", controller.Event{Resource: &pbresource.Resource{Id: self, Owner: owner}}, owner},
		{"written without an owner: nothing", controller.Event{Resource: &pbresource.Resource{Id: self}}, nil},
		{"deleted: the deleted incarnation", controller.Event{Resource: &pbresource.Resource{Id: self, Owner: owner}, Deleted: true}, self},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := reaper.Map(c.ev, nil)
			switch {
			case c.want == nil && len(got) != 0:
				t.Errorf("Map = %v, want nothing", got)
			case c.want != nil && (len(got) != 1 || got[0].ID.GetUid() != c.want.GetUid() || got[0].ID.GetName() != c.want.GetName()):
				t.Errorf("Map = %v, want %s", got, c.want)
			}
		})
	}
}

func TestReaperReapsWideTrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.setLeader(true)
		root := h.write(thingType, "troot", nil)
		const parts = 300
		for i := range parts {
			p := h.write(partType, fmt.Sprintf("p%d", i), root)
			h.write(bitType, fmt.Sprintf("b%d-a", i), p)
			h.write(bitType, fmt.Sprintf("b%d-b", i), p)
		}
		h.write(bitType, "bfree", nil)
		synctest.Wait()

		h.delete(thingType, "troot")
		synctest.Wait()
		for _, typ := range []*pbresource.Type{partType, bitType} {
			resp, err := h.svc.List(h.ctx, &pbresource.ListRequest{Type: typ, Tenancy: &pbresource.Tenancy{Namespace: "*"}})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range resp.GetResources() {
				names = append(names, r.GetId().GetName())
			}
			want := 0
			if typ == bitType {
				want = 1
			}
			if len(names) != want {
				t.Errorf("%d %s left after the root was deleted (%v), want %d", len(names), typ.GetKind(), names[:min(len(names), 5)], want)
			}
		}
		h.expectStored(map[string]bool{"bfree": true})
	})
}

// strongReads counts the consistent reads made through it.
type strongReads struct {
	resource.API
	n int
}

func (s *strongReads) Read(ctx context.Context, req *pbresource.ReadRequest) (*pbresource.ReadResponse, error) {
	if req.GetConsistent() {
		s.n++
	}
	return s.API.Read(ctx, req)
}

// The reconcile of an owner that this server's store holds costs no
// strong read (a leadership check with the followers): every write of an
// owned resource asks for one. One the store does not hold is confirmed
// with a strong read before anything is reaped.
func TestReaperReadsStronglyOnlyAMissingOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		owner := h.write(thingType, "t1", nil)
		h.write(partType, "p1", owner)
		reads := &strongReads{API: h.svc}
		r := &reaper.Reconciler{Client: reads, Registry: h.reg}
		if err := r.Reconcile(h.ctx, controller.Request{ID: owner.GetId()}); err != nil {
			t.Fatal(err)
		}
		if reads.n != 0 {
			t.Fatalf("a stored owner cost %d strong reads, want 0", reads.n)
		}
		h.expectStored(map[string]bool{"t1": true, "p1": true})

		h.delete(thingType, "t1")
		if err := r.Reconcile(h.ctx, controller.Request{ID: owner.GetId()}); err != nil {
			t.Fatal(err)
		}
		if reads.n != 1 {
			t.Fatalf("a missing owner cost %d strong reads, want 1", reads.n)
		}
		h.expectStored(map[string]bool{"t1": false, "p1": false})
	})
}
