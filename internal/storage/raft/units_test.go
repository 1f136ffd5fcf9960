package raft

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/storage"
	"trellis.dev/trellis/internal/storage/inmem"
)

func TestErrorCodecKeepsSentinels(t *testing.T) {
	batch, err := inmem.NewStore().WriteBatch(1, []*pbresource.Resource{testResource("a"), {Id: testID("b"), Version: "9"}})
	if batch != nil || err == nil {
		t.Fatal("expected a batch conflict")
	}
	cases := []struct {
		name string
		err  error
		want []error
		not  []error
	}{
		{"not found", storage.ErrNotFound, []error{storage.ErrNotFound}, []error{storage.ErrCASFailure}},
		{"cas", fmt.Errorf("%w (it exists)", storage.ErrCASFailure), []error{storage.ErrCASFailure}, []error{storage.ErrBatchConflict}},
		{"wrong uid", storage.ErrWrongUID, []error{storage.ErrWrongUID}, nil},
		{"batch", err, []error{storage.ErrBatchConflict, storage.ErrCASFailure}, []error{storage.ErrWrongUID}},
		{"not leader", notLeader("x"), []error{ErrNotLeader}, []error{storage.ErrUnavailable}},
		{"unknown", outcomeUnknown("lost", errors.New("boom")), []error{storage.ErrUnavailable, ErrOutcomeUnknown}, []error{ErrNotLeader}},
		{"invalid", invalid("bad %s", "field"), []error{ErrInvalidRequest}, nil},
		{"bad snapshot", fmt.Errorf("%w: x", ErrBadSnapshot), []error{ErrBadSnapshot}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := decodeError(encodeError(c.err))
			if got.Error() != c.err.Error() {
				t.Errorf("message %q, want %q", got, c.err)
			}
			for _, w := range c.want {
				if !errors.Is(got, w) {
					t.Errorf("lost %v", w)
				}
			}
			for _, n := range c.not {
				if errors.Is(got, n) {
					t.Errorf("gained %v", n)
				}
			}
		})
	}
	if encodeError(nil) != nil || decodeError(nil) != nil {
		t.Fatal("nil does not round-trip")
	}
}

func TestLeaderQueue(t *testing.T) {
	cases := []struct {
		pushes []bool
		want   []bool
	}{
		{[]bool{false}, []bool{false}},
		{[]bool{true}, []bool{true}},
		{[]bool{true, true}, []bool{true}},
		{[]bool{true, false}, []bool{true, false}},
		{[]bool{true, false, true}, []bool{true}},               // never delivered: only the end state
		{[]bool{true, false, true, false}, []bool{true, false}}, // ends false
	}
	for _, c := range cases {
		var q leaderQueue
		for _, v := range c.pushes {
			q.push(v)
		}
		var got []bool
		for v, ok := q.pop(); ok; v, ok = q.pop() {
			got = append(got, v)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("pushes %v: got %v, want %v", c.pushes, got, c.want)
		}
	}
	// A subscriber that saw true and is late learns of a lost leadership
	// even when it was regained meanwhile.
	var q leaderQueue
	q.push(true)
	q.pop()
	q.push(false)
	q.push(true)
	var got []bool
	for v, ok := q.pop(); ok; v, ok = q.pop() {
		got = append(got, v)
	}
	if fmt.Sprint(got) != "[false true]" {
		t.Fatalf("late subscriber got %v", got)
	}
	// Repeated flapping never grows the queue beyond two.
	q = leaderQueue{}
	q.push(true)
	q.pop()
	for i := range 1000 {
		q.push(i%2 == 1)
	}
	if len(q.pending) > 2 {
		t.Fatalf("queue grew to %d", len(q.pending))
	}
}

func TestHCLogAdapter(t *testing.T) {
	var buf bytes.Buffer
	l := newHCLogAdapter(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})), "raft")
	l.Debug("hidden")
	l.Trace("hidden too")
	l.Info("shown", "k", 1)
	l.Named("net").With("peer", "p").Warn("careful")
	l.Error("bad")
	l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}).Print("[ERROR] from std")
	out := buf.String()
	for _, want := range []string{
		`level=INFO msg=shown logger=raft k=1`,
		`level=WARN msg=careful logger=raft.net peer=p`,
		`level=ERROR msg=bad logger=raft`,
		`level=ERROR msg="from std"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "hidden") {
		t.Errorf("debug output leaked:\n%s", out)
	}
	if l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Errorf("levels: debug %v info %v level %v", l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
}

func TestConfigValidation(t *testing.T) {
	good := Config{ID: "s1", RaftAddr: "127.0.0.1:0", ServerAddr: "127.0.0.1:7701"}
	cases := map[string]func(*Config){
		"ID":                func(c *Config) { c.ID = "" },
		"RaftAddr":          func(c *Config) { c.RaftAddr = "nope" },
		"ServerAddr":        func(c *Config) { c.ServerAddr = "0.0.0.0:7701" },
		"RaftAdvertiseAddr": func(c *Config) { c.RaftAdvertiseAddr = "10.0.0.1:0" },
		"Tuning":            func(c *Config) { c.Tuning.HoldTimeout = -1 },
	}
	if err := good.validate(); err != nil {
		t.Fatal(err)
	}
	for field, mutate := range cases {
		c := good
		mutate(&c)
		err := c.validate()
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: got %v, want an ErrInvalidConfig naming it", field, err)
		}
	}
}

func TestMetrics(t *testing.T) {
	nodes := startCluster(t, 1, false, testTuning())
	mustWrite(t, nodes[0].b, testResource("a"))
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(nodes[0].b.Metrics()); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	if n < 12 {
		t.Fatalf("only %d metrics", n)
	}
	want := `
# HELP trellis_raft_leader 1 when this server is the leader and has caught up.
# TYPE trellis_raft_leader gauge
trellis_raft_leader 1
# HELP trellis_raft_state 1 for this server's current Raft state, 0 for the others.
# TYPE trellis_raft_state gauge
trellis_raft_state{state="Candidate"} 0
trellis_raft_state{state="Follower"} 0
trellis_raft_state{state="Leader"} 1
trellis_raft_state{state="Shutdown"} 0
# HELP trellis_raft_voters Voters in this server's latest Raft configuration.
# TYPE trellis_raft_voters gauge
trellis_raft_voters 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "trellis_raft_leader", "trellis_raft_state", "trellis_raft_voters"); err != nil {
		t.Fatal(err)
	}
	if c := testutil.CollectAndCount(nodes[0].b.metrics.apply, "trellis_raft_apply_duration_seconds"); c == 0 {
		t.Fatal("no apply latency recorded")
	}
}

// checkCommand names the compare of a batch it refuses, and the fault in
// it.
func TestCheckCommandNamesBatchCompare(t *testing.T) {
	members := []*pbresource.Resource{testResource("a")}
	good := &pbresource.Compare{Op: pbresource.Compare_OP_ABSENT, Id: testResource("b").GetId()}
	noName := &pbresource.Compare{Op: pbresource.Compare_OP_EXISTS, Id: &pbresource.ID{Type: testType}}
	cases := []struct {
		compares []*pbresource.Compare
		want     string
	}{
		{[]*pbresource.Compare{good}, ""},
		{[]*pbresource.Compare{good, {Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: testType}}}, ""},
		{[]*pbresource.Compare{good, {Op: pbresource.Compare_OP_VERSION}}, "compares[1].id is missing"},
		{[]*pbresource.Compare{noName}, "compares[0].id.name is empty"},
		{[]*pbresource.Compare{good, {Op: pbresource.Compare_OP_ABSENT, Id: &pbresource.ID{Name: "x"}}}, "compares[1].id.type needs"},
		{[]*pbresource.Compare{{Id: good.GetId()}}, "compares[0].op OP_UNSPECIFIED is unknown"},
		{[]*pbresource.Compare{{Op: pbresource.Compare_OP_NOTHING_NEWER, Id: &pbresource.ID{Type: testType}, Version: "v1"}}, `compares[0].version "v1" is not a store version`},
	}
	for _, c := range cases {
		err := checkCommand(writeBatchCommand(members, c.compares))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: unexpected %v", c.compares, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidRequest)):
			t.Errorf("got %v, want an invalid request naming %q", err, c.want)
		}
	}
}

// checkCommand names the member of a batch it refuses, and the fault in it.
func TestCheckCommandNamesBatchMember(t *testing.T) {
	noName := testResource("x")
	noName.Id.Name = ""
	noType := testResource("y")
	noType.Id.Type = nil
	cases := []struct {
		members []*pbresource.Resource
		want    string
	}{
		{[]*pbresource.Resource{testResource("a"), testResource("b")}, ""},
		{[]*pbresource.Resource{testResource("a"), nil}, "resources[1] is missing"},
		{[]*pbresource.Resource{testResource("a"), testResource("b"), noName}, "resources[2].id.name is empty"},
		{[]*pbresource.Resource{noType, testResource("b")}, "resources[0].id.type is missing"},
		{[]*pbresource.Resource{testResource("a"), {}}, "resources[1].id is missing"},
	}
	for _, c := range cases {
		err := checkCommand(writeBatchCommand(c.members, nil))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: unexpected %v", c.members, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalidRequest)):
			t.Errorf("got %v, want an invalid request naming %q", err, c.want)
		}
	}
}
