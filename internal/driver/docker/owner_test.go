package docker

import "testing"

// A container is an agent's only when it carries both its cluster and its
// identity: the name alone, which every dev's dev-1 shares, is not enough.
func TestOwnerOwns(t *testing.T) {
	me := ownerOf(Config{Cluster: "blue", AgentID: "a1"}, "dev-1")
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{"mine", map[string]string{LabelAgent: "dev-1", LabelCluster: "blue", LabelAgentID: "a1"}, true},
		{"mine under another name", map[string]string{LabelAgent: "renamed", LabelCluster: "blue", LabelAgentID: "a1"}, true},
		{"same name, another dev run", map[string]string{LabelAgent: "dev-1", LabelCluster: "blue", LabelAgentID: "a2"}, false},
		{"same name, another cluster", map[string]string{LabelAgent: "dev-1", LabelCluster: "green", LabelAgentID: "a1"}, false},
		{"name only (an older agent's)", map[string]string{LabelAgent: "dev-1"}, false},
		{"no labels", nil, false},
	} {
		if got := me.owns(tc.labels); got != tc.want {
			t.Errorf("%s: owns = %v, want %v", tc.name, got, tc.want)
		}
	}
	// The defaults are an agent's own: cluster "default", the name as id.
	d := ownerOf(Config{}, "node-1")
	if l := d.labels(); l[LabelCluster] != "default" || l[LabelAgentID] != "node-1" || l[LabelAgent] != "node-1" {
		t.Errorf("default labels %v", l)
	}
}

// Two agents of the same name in different clusters share an engine:
// neither lists (and so sweeps) the other's containers.
func TestListKeepsToItsOwner(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	blue := newTestDriver(t, Config{Agent: "same", Cluster: "blue", AgentID: "b-" + randomHex(t)})
	green := newTestDriver(t, Config{Agent: "same", Cluster: "green", AgentID: "g-" + randomHex(t)})
	h, _ := startReady(t, ctx, blue, probeSpec(t, "app"))
	if found, err := green.List(ctx); err != nil || len(found) != 0 {
		t.Fatalf("the other cluster's List: %+v, %v; want nothing", found, err)
	}
	if found, err := blue.List(ctx); err != nil || len(found) != 1 || found[0].Handle.ID != h.ID {
		t.Fatalf("the owner's List: %+v, %v; want its container", found, err)
	}
}
