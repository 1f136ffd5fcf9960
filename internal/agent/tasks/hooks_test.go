package tasks

import (
	"encoding/json"
	"slices"
	"testing"
)

// Where a task is with its components' hooks, step by step, and what
// Poststops are due at each step: those whose Prestart was called, the
// failed one too, in reverse, minus those that returned.
func TestHookProgress(t *testing.T) {
	var p hookProgress
	steps := []struct {
		do   func()
		due  []string
		done map[string]bool
	}{
		{func() {}, nil, map[string]bool{"a": false}},
		{func() { p.calling("a") }, []string{"a"}, map[string]bool{"a": false}},
		{func() { p.calling("a") }, []string{"a"}, map[string]bool{"a": false}}, // called again after a kill: recorded once
		{func() { p.prestarted("a") }, []string{"a"}, map[string]bool{"a": true}},
		{func() { p.calling("b"); p.prestarted("b") }, []string{"b", "a"}, map[string]bool{"a": true, "b": true}},
		{func() { p.calling("c") }, []string{"c", "b", "a"}, map[string]bool{"c": false}}, // c's Prestart failed
		{func() { p.Poststopped = append(p.Poststopped, "c") }, []string{"b", "a"}, nil},
		{func() { p.Poststopped = append(p.Poststopped, "b", "a") }, nil, nil},
	}
	for i, s := range steps {
		s.do()
		if got := poststopsDue(p); !slices.Equal(got, s.due) {
			t.Errorf("step %d: due %q, want %q", i, got, s.due)
		}
		for name, want := range s.done {
			if p.prestartDone(name) != want {
				t.Errorf("step %d: prestart of %s done %v, want %v", i, name, !want, want)
			}
		}
	}
	if len(p.Prestarts) != 3 {
		t.Errorf("prestarts recorded %v, want a, b, c once each", p.Prestarts)
	}
}

// The progress goes into the task's record as a copy, and comes back from
// it whole; a task no hook has touched records none.
func TestHookProgressInTheRecord(t *testing.T) {
	if hooksRecord(hookProgress{}) != nil {
		t.Error("an empty progress is recorded")
	}
	p := hookProgress{Prestarts: []hookStep{{Component: "a", Done: true}, {Component: "b"}}, Ran: true}
	rec := hooksRecord(p)
	p.Prestarts[1].Done = true // the task's own copy moves on
	b, err := json.Marshal(&record{UID: "U", Hooks: rec})
	if err != nil {
		t.Fatal(err)
	}
	var back record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Hooks == nil || !back.Hooks.Ran || !back.Hooks.prestartDone("a") || back.Hooks.prestartDone("b") || !slices.Equal(poststopsDue(*back.Hooks), []string{"b", "a"}) {
		t.Errorf("read back %+v from %s", back.Hooks, b)
	}
}
