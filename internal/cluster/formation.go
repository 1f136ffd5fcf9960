package cluster

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	pbcluster "trellis.dev/trellis/api/cluster/v1"
	raftstore "trellis.dev/trellis/internal/storage/raft"
)

// peer is a server as discovery knows it.
type peer struct {
	ID         string
	RaftAddr   string
	ServerAddr string
	Expect     int
}

func (p peer) proto() *pbcluster.Server {
	return &pbcluster.Server{Id: p.ID, RaftAddr: p.RaftAddr, ServerAddr: p.ServerAddr, BootstrapExpect: uint32(p.Expect)}
}

func peerFrom(s *pbcluster.Server) peer {
	return peer{ID: s.GetId(), RaftAddr: s.GetRaftAddr(), ServerAddr: s.GetServerAddr(), Expect: int(s.GetBootstrapExpect())}
}

// discovery is what a server without cluster state has learned: the other
// servers without state (from the servers it asked, and from those that
// asked it, transitively), and the server-to-server addresses of servers that already
// belong to a cluster.
type discovery struct {
	mu        sync.Mutex
	self      peer
	fresh     map[string]peer // by id, self included
	clustered map[string]bool // server-to-server addresses
}

func newDiscovery(self peer) *discovery {
	return &discovery{self: self, fresh: map[string]peer{self.ID: self}, clustered: map[string]bool{}}
}

// learn records what one exchange taught: the other server, whether it
// has state, and the servers without state it knows.
func (d *discovery) learn(other peer, hasState bool, known []*pbcluster.Server) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if other.ID != "" && other.ID != d.self.ID {
		if hasState {
			delete(d.fresh, other.ID)
			if other.ServerAddr != "" {
				d.clustered[other.ServerAddr] = true
			}
		} else {
			d.fresh[other.ID] = other
		}
	}
	if hasState {
		return
	}
	for _, k := range known {
		p := peerFrom(k)
		if p.ID == "" || p.ID == d.self.ID || p.RaftAddr == "" {
			continue
		}
		if _, ok := d.fresh[p.ID]; !ok {
			d.fresh[p.ID] = p
		}
	}
}

// knownFresh lists the servers without state known here, self included.
func (d *discovery) knownFresh() []*pbcluster.Server {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*pbcluster.Server
	for _, id := range slices.Sorted(maps.Keys(d.fresh)) {
		out = append(out, d.fresh[id].proto())
	}
	return out
}

func (d *discovery) state() formationState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return formationState{
		Self:      d.self,
		Fresh:     slices.Collect(maps.Values(d.fresh)),
		Clustered: slices.Sorted(maps.Keys(d.clustered)),
	}
}

// formationState is the input of decideFormation.
type formationState struct {
	Self      peer
	Fresh     []peer   // servers without state, self included
	Clustered []string // server-to-server addresses of servers in a cluster
}

// formationDecision is what a server without state does next: bootstrap
// a new cluster of exactly Bootstrap, ask to join through JoinVia, or wait
// (Wait says why).
type formationDecision struct {
	Bootstrap []raftstore.Server
	JoinVia   []string
	Wait      string
}

// decideFormation applies the bootstrap-expect rules Consul and Nomad users
// know. A server that finds an existing cluster joins it. Otherwise, once
// the servers without state expecting the same number reach that number,
// each of them bootstraps with that same set, so that they all start with
// the identical configuration. A server that disagrees on the number
// blocks bootstrapping until the operator fixes it.
func decideFormation(s formationState) formationDecision {
	if len(s.Clustered) > 0 {
		return formationDecision{JoinVia: s.Clustered}
	}
	if s.Self.Expect == 0 {
		return formationDecision{Wait: "no cluster found yet, and -bootstrap-expect is not set: waiting to join one"}
	}
	var group []peer
	var conflicts []string
	for _, p := range s.Fresh {
		switch {
		case p.Expect == s.Self.Expect:
			group = append(group, p)
		case p.Expect != 0:
			conflicts = append(conflicts, fmt.Sprintf("%s expects %d", p.ID, p.Expect))
		}
	}
	if len(conflicts) > 0 {
		slices.Sort(conflicts)
		return formationDecision{Wait: fmt.Sprintf("servers disagree on -bootstrap-expect (this one expects %d; %s): not bootstrapping",
			s.Self.Expect, strings.Join(conflicts, ", "))}
	}
	if len(group) < s.Self.Expect {
		return formationDecision{Wait: fmt.Sprintf("found %d of %d servers expected to bootstrap", len(group), s.Self.Expect)}
	}
	slices.SortFunc(group, func(a, b peer) int { return strings.Compare(a.ID, b.ID) })
	servers := make([]raftstore.Server, len(group))
	for i, p := range group {
		servers[i] = raftstore.Server{ID: p.ID, RaftAddr: p.RaftAddr, ServerAddr: p.ServerAddr}
	}
	return formationDecision{Bootstrap: servers}
}

// joinPlan is how the leader admits a server: remove stale members first,
// then add (or update) the server as a voter, and record its addresses.
type joinPlan struct {
	Remove   []string
	AddVoter bool
	Register bool
}

// planJoin decides how to admit s into a cluster whose members are
// members and whose registry holds rec for s (if recOK). A member with
// another id at s's Raft address is an earlier life of the same machine
// (its data wiped): it is removed, as Consul does.
func planJoin(members []raftstore.Member, s raftstore.Server, rec raftstore.Server, recOK bool) joinPlan {
	var plan joinPlan
	plan.AddVoter = true
	for _, m := range members {
		if m.ID == s.ID {
			if m.RaftAddr == s.RaftAddr && m.Voter {
				plan.AddVoter = false
			}
			continue
		}
		if m.RaftAddr == s.RaftAddr {
			plan.Remove = append(plan.Remove, m.ID)
		}
	}
	plan.Register = !recOK || rec != s
	return plan
}
