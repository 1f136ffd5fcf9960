package session

import (
	"slices"
	"testing"

	pbresource "trellis.dev/trellis/api/resource/v1"
)

func report(uid, after string) Report {
	return Report{After: after, Request: &pbresource.WriteStatusRequest{Id: &pbresource.ID{Uid: uid, Name: uid}}}
}

// followOrder puts a report after the one it follows, keeps the rest in
// their order, and drops a report whose predecessor is not in the batch.
func TestFollowOrder(t *testing.T) {
	cases := []struct {
		name  string
		batch []Report
		want  []string
	}{
		{"none follow", []Report{report("a", ""), report("b", "")}, []string{"a", "b"}},
		{"already in order", []Report{report("old", ""), report("new", "old")}, []string{"old", "new"}},
		{"replacement first", []Report{report("new", "old"), report("x", ""), report("old", "")}, []string{"x", "old", "new"}},
		{"a chain", []Report{report("c", "b"), report("b", "a"), report("a", "")}, []string{"a", "b", "c"}},
		{"predecessor not in the batch", []Report{report("new", "gone"), report("x", "")}, []string{"x"}},
		{"a cycle goes nowhere", []Report{report("p", "q"), report("q", "p"), report("x", "")}, []string{"x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, r := range followOrder(c.batch) {
				got = append(got, uidOf(r))
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("followOrder = %v, want %v", got, c.want)
			}
		})
	}
}
