package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pbcluster "trellis.dev/trellis/api/cluster/v1"
	raftstore "trellis.dev/trellis/internal/storage/raft"
)

func TestDecideFormation(t *testing.T) {
	a := peer{ID: "a", RaftAddr: "a:1", ServerAddr: "a:2", Expect: 3}
	b := peer{ID: "b", RaftAddr: "b:1", ServerAddr: "b:2", Expect: 3}
	c := peer{ID: "c", RaftAddr: "c:1", ServerAddr: "c:2", Expect: 3}
	joiner := peer{ID: "j", RaftAddr: "j:1", ServerAddr: "j:2"}
	odd := peer{ID: "o", RaftAddr: "o:1", ServerAddr: "o:2", Expect: 5}
	solo := peer{ID: "s", RaftAddr: "s:1", ServerAddr: "s:2", Expect: 1}
	cases := []struct {
		name string
		in   formationState
		want string
	}{
		{"alone, expect 1", formationState{Self: solo, Fresh: []peer{solo}}, "bootstrap [s]"},
		{"two of three", formationState{Self: a, Fresh: []peer{a, b}}, "wait found 2 of 3"},
		{"three of three, any order", formationState{Self: b, Fresh: []peer{c, a, b}}, "bootstrap [a b c]"},
		{"a joiner does not count", formationState{Self: a, Fresh: []peer{a, b, joiner}}, "wait found 2 of 3"},
		{"a joiner does not block", formationState{Self: a, Fresh: []peer{a, b, c, joiner}}, "bootstrap [a b c]"},
		{"disagreement blocks", formationState{Self: a, Fresh: []peer{a, b, c, odd}}, "wait servers disagree"},
		{"existing cluster wins", formationState{Self: a, Fresh: []peer{a, b, c}, Clustered: []string{"x:2"}}, "join [x:2]"},
		{"no expect waits", formationState{Self: joiner, Fresh: []peer{joiner, a, b, c}}, "wait no cluster found"},
		{"no expect joins", formationState{Self: joiner, Fresh: []peer{joiner}, Clustered: []string{"a:2", "b:2"}}, "join [a:2 b:2]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decideFormation(tc.in)
			var got string
			switch {
			case d.Bootstrap != nil:
				var ids []string
				for _, s := range d.Bootstrap {
					ids = append(ids, s.ID)
				}
				got = fmt.Sprint("bootstrap ", ids)
			case d.JoinVia != nil:
				got = fmt.Sprint("join ", d.JoinVia)
			default:
				got = "wait " + d.Wait
			}
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got %q, want %q...", got, tc.want)
			}
		})
	}
}

func TestDiscoveryLearns(t *testing.T) {
	self := peer{ID: "a", RaftAddr: "a:1", ServerAddr: "a:2", Expect: 3}
	d := newDiscovery(self)
	// b tells about itself and about c (transitively).
	d.learn(peer{ID: "b", RaftAddr: "b:1", ServerAddr: "b:2", Expect: 3}, false,
		[]*pbcluster.Server{{Id: "c", RaftAddr: "c:1", ServerAddr: "c:2", BootstrapExpect: 3}, {Id: "a", RaftAddr: "elsewhere"}})
	if got := decideFormation(d.state()); len(got.Bootstrap) != 3 || got.Bootstrap[0].RaftAddr != "a:1" {
		t.Fatalf("after learning b and c: %+v", got)
	}
	// c turns out to be in a cluster already: join it instead.
	d.learn(peer{ID: "c", RaftAddr: "c:1", ServerAddr: "c:2", Expect: 3}, true, nil)
	if got := decideFormation(d.state()); fmt.Sprint(got.JoinVia) != "[c:2]" {
		t.Fatalf("after c reported state: %+v", got)
	}
}

func TestPlanJoin(t *testing.T) {
	members := []raftstore.Member{
		{ID: "a", RaftAddr: "a:1", Voter: true},
		{ID: "b", RaftAddr: "b:1", Voter: true},
		{ID: "n", RaftAddr: "n:1", Voter: false},
	}
	rec := func(id, raft string) raftstore.Server {
		return raftstore.Server{ID: id, RaftAddr: raft, ServerAddr: id + ":2"}
	}
	cases := []struct {
		name  string
		s     raftstore.Server
		rec   raftstore.Server
		recOK bool
		want  joinPlan
	}{
		{"new server", rec("c", "c:1"), raftstore.Server{}, false, joinPlan{AddVoter: true, Register: true}},
		{"member already, record current", rec("a", "a:1"), rec("a", "a:1"), true, joinPlan{}},
		{"member already, no record", rec("a", "a:1"), raftstore.Server{}, false, joinPlan{Register: true}},
		{"member at a new address", rec("a", "a:9"), rec("a", "a:1"), true, joinPlan{AddVoter: true, Register: true}},
		{"non-voter promoted", rec("n", "n:1"), rec("n", "n:1"), true, joinPlan{AddVoter: true}},
		{"new id at an old address", rec("b2", "b:1"), raftstore.Server{}, false, joinPlan{Remove: []string{"b"}, AddVoter: true, Register: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := planJoin(members, tc.s, tc.rec, tc.recOK)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestAdvertisedGRPC(t *testing.T) {
	cases := []struct {
		grpc, adv, raft, want string
	}{
		{"10.0.0.1:7701", "", "0.0.0.0:7702", "10.0.0.1:7701"},
		{"0.0.0.0:7701", "", "10.0.0.2:7702", "10.0.0.2:7701"},
		{":7701", "10.0.0.3:7702", "0.0.0.0:7702", "10.0.0.3:7701"},
		{"[::]:7701", "", "[fd00::1]:7702", "[fd00::1]:7701"},
		{"0.0.0.0:7701", "", "0.0.0.0:7702", ""},
		{"localhost", "", "127.0.0.1:7702", ""},
		{"127.0.0.1:0", "", "127.0.0.1:7702", ""},
	}
	for _, tc := range cases {
		got, err := advertisedServer(tc.grpc, tc.adv, tc.raft)
		if tc.want == "" {
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "ServerAddr") {
				t.Errorf("%q: got %q, %v; want an error naming ServerAddr", tc.grpc, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q/%q/%q: got %q, %v; want %q", tc.grpc, tc.adv, tc.raft, got, err, tc.want)
		}
	}
}

func TestConfigRefusals(t *testing.T) {
	good := Config{RaftAddr: "127.0.0.1:0", ServerAddr: "127.0.0.1:7701"}
	cases := map[string]func(*Config){
		"BootstrapExpect": func(c *Config) { c.BootstrapExpect = -1 },
		"NodeID":          func(c *Config) { c.NodeID = "has space" },
		"RaftAddr":        func(c *Config) { c.RaftAddr = "" },
		"RetryJoin[1]":    func(c *Config) { c.RetryJoin = []string{"a:1", "nohostport"} },
	}
	for field, mutate := range cases {
		c := good
		mutate(&c)
		if _, err := c.normalize(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: got %v", field, err)
		}
	}
}

func TestNodeIDIsKept(t *testing.T) {
	dir := t.TempDir()
	id, err := loadNodeID(dir, "")
	if err != nil || !nodeIDPattern.MatchString(id) {
		t.Fatalf("first start: %q, %v", id, err)
	}
	again, err := loadNodeID(dir, "")
	if err != nil || again != id {
		t.Fatalf("second start: %q, %v; want %q", again, err, id)
	}
	if _, err := loadNodeID(dir, "someone-else"); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a data dir of another node: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, nodeIDFile), []byte("bad id!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadNodeID(dir, ""); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("a corrupt node-id file: %v", err)
	}
	named, err := loadNodeID(t.TempDir(), "server-1")
	if err != nil || named != "server-1" {
		t.Fatalf("configured id: %q, %v", named, err)
	}
	a, _ := loadNodeID("", "")
	b, _ := loadNodeID("", "")
	if a == b {
		t.Fatal("in-memory servers got the same id")
	}
}

// TestServiceRefusesBadRequests sends malformed membership requests over
// gRPC: each is refused with InvalidArgument naming the field, or NotFound,
// and the cluster is unchanged.
func TestServiceRefusesBadRequests(t *testing.T) {
	s := startServer(t, listen(t, ""), Config{BootstrapExpect: 1, Logger: testLogger(t), Tuning: raftstore.DevTuning()})
	waitReady(t, s)
	conn, err := grpc.NewClient(s.cfg.ServerAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pbcluster.NewClusterClient(conn)
	ctx := ctxT(t)
	checks := []struct {
		name  string
		call  func() error
		code  codes.Code
		field string
	}{
		{"join without server", func() error { _, err := client.Join(ctx, &pbcluster.JoinRequest{}); return err }, codes.InvalidArgument, "server"},
		{"join without raft addr", func() error {
			_, err := client.Join(ctx, &pbcluster.JoinRequest{Server: &pbcluster.Server{Id: "x", ServerAddr: "x:1"}})
			return err
		}, codes.InvalidArgument, "server.raft_addr"},
		{"join with a bad id", func() error {
			_, err := client.Join(ctx, &pbcluster.JoinRequest{Server: &pbcluster.Server{Id: "x y", RaftAddr: "x:1", ServerAddr: "x:2"}})
			return err
		}, codes.InvalidArgument, "server.id"},
		{"info from a half server", func() error {
			_, err := client.Info(ctx, &pbcluster.InfoRequest{From: &pbcluster.Server{Id: "x"}})
			return err
		}, codes.InvalidArgument, "from.raft_addr"},
		{"remove nobody", func() error { _, err := client.RemovePeer(ctx, &pbcluster.RemovePeerRequest{}); return err }, codes.InvalidArgument, "id_or_address"},
		{"remove unknown", func() error {
			_, err := client.RemovePeer(ctx, &pbcluster.RemovePeerRequest{IdOrAddress: "ghost"})
			return err
		}, codes.NotFound, "ghost"},
	}
	for _, c := range checks {
		err := c.call()
		st, _ := status.FromError(err)
		if st.Code() != c.code || !strings.Contains(st.Message(), c.field) {
			t.Errorf("%s: got %v, want %v naming %q", c.name, err, c.code, c.field)
		}
	}
	peers, err := s.c.Peers()
	if err != nil || len(peers) != 1 {
		t.Fatalf("membership changed: %+v %v", peers, err)
	}
	info, err := client.Info(ctx, &pbcluster.InfoRequest{})
	if err != nil || !info.GetHasState() || info.GetServer().GetId() != s.c.ID() || info.GetLeaderId() != s.c.ID() {
		t.Fatalf("info: %v, %v", info, err)
	}
}

func TestToStatus(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("%w: x", ErrPeerNotFound), codes.NotFound},
		{fmt.Errorf("%w: x", raftstore.ErrBadSnapshot), codes.InvalidArgument},
		{fmt.Errorf("%w: x", raftstore.ErrInvalidRequest), codes.InvalidArgument},
		{ErrNoLeader, codes.Unavailable},
		{raftstore.ErrShutdown, codes.Unavailable},
		{fmt.Errorf("%w: x", raftstore.ErrNotLeader), codes.Unavailable},
		{fmt.Errorf("x: %w", context.Canceled), codes.Canceled},
		{status.Error(codes.PermissionDenied, "no"), codes.PermissionDenied},
		{errors.New("disk on fire"), codes.Internal},
	}
	for _, c := range cases {
		if got := status.Code(ToStatus(c.err)); got != c.code {
			t.Errorf("%v: %v, want %v", c.err, got, c.code)
		}
	}
	if ToStatus(nil) != nil {
		t.Error("nil became an error")
	}
}
