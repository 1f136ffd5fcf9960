package driver

import "testing"

func TestOutputBuffer(t *testing.T) {
	b := &OutputBuffer{Limit: 5}
	for _, s := range []string{"ab", "cde", "fg"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := string(b.Bytes()); got != "abcde" {
		t.Errorf("kept %q, want the first 5 bytes", got)
	}
	b = &OutputBuffer{Limit: 10}
	for _, w := range []string{"1234", "567890AB", "CD", ""} {
		if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; want every byte taken", w, n, err)
		}
	}
	if got := string(b.Bytes()); got != "1234567890" {
		t.Fatalf("kept %q", got)
	}
}
