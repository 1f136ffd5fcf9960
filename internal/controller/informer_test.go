package controller

import "testing"

// seenSet keeps a map per namespace, and drops a namespace's map with its
// last name, so that namespaces come and go without leaving maps behind.
func TestSeenSet(t *testing.T) {
	s := make(seenSet)
	a, b, c := slot{"ns1", "a"}, slot{"ns1", "b"}, slot{"ns2", "a"}
	s.set(a, seenResource{uid: "ua", version: "1"})
	s.set(b, seenResource{uid: "ub", version: "2"})
	s.set(c, seenResource{uid: "uc", version: "3"})
	s.set(a, seenResource{uid: "ua", version: "4"})
	for _, tc := range []struct {
		k       slot
		version string
	}{{a, "4"}, {b, "2"}, {c, "3"}, {slot{"ns2", "b"}, ""}, {slot{"ns3", "a"}, ""}} {
		got, ok := s.get(tc.k)
		if ok != (tc.version != "") || got.version != tc.version {
			t.Errorf("get(%v) = %+v, %v; want version %q", tc.k, got, ok, tc.version)
		}
	}
	s.delete(a)
	s.delete(c)
	s.delete(slot{"ns3", "x"})
	if _, ok := s.get(a); ok {
		t.Error("a is still remembered after delete")
	}
	if _, ok := s.get(b); !ok {
		t.Error("deleting a forgot b")
	}
	if _, ok := s["ns2"]; ok || len(s) != 1 {
		t.Errorf("namespaces left: %v, want only ns1", s)
	}
}
