package ids

import (
	"regexp"
	"testing"
)

func TestNewUUID(t *testing.T) {
	form := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 100 {
		u, err := NewUUID()
		if err != nil {
			t.Fatal(err)
		}
		if !form.MatchString(u) {
			t.Fatalf("%q is not a version 4 uuid", u)
		}
		if seen[u] {
			t.Fatalf("%q twice", u)
		}
		seen[u] = true
	}
}
