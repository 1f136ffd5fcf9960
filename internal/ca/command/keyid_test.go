package command

import (
	"strings"
	"testing"
)

func TestShortKeyID(t *testing.T) {
	full := strings.TrimSuffix(strings.Repeat("ab:", 28), ":") + ":77:d9:ed:01"
	for _, tc := range []struct{ id, want string }{
		{full, "ab:ab:ab:ab:…:d9:ed:01"},
		{"aa:cc:6c:6c:77:d9:ed", "aa:cc:6c:6c:77:d9:ed"}, // seven bytes: nothing to leave out
		{"", ""},
		{"not-a-key-id", "not-a-key-id"},
	} {
		if got := ShortKeyID(tc.id); got != tc.want {
			t.Errorf("ShortKeyID(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
	if n := len(full); n != 95 {
		t.Fatalf("the test's id is %d characters, want a SHA-256's 95", n)
	}
}
