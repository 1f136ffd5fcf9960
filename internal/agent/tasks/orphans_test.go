package tasks

import (
	"testing"

	"trellis.dev/trellis/internal/driver"
)

func TestOrphans(t *testing.T) {
	held := []driver.Owned{
		{Handle: driver.Handle{ID: "a"}, TaskUID: "T1", Container: "app"},
		{Handle: driver.Handle{ID: "b"}, TaskUID: "T2", Container: "app"},
		{Handle: driver.Handle{ID: "c"}, TaskUID: "T2", Container: "proxy"},
	}
	got := orphans(held, map[string]bool{"T1": true})
	if len(got) != 2 || got[0].Handle.ID != "b" || got[1].Handle.ID != "c" {
		t.Fatalf("orphans = %+v, want the two containers of T2", got)
	}
	if got := orphans(held, map[string]bool{"T1": true, "T2": true}); len(got) != 0 {
		t.Fatalf("orphans of known tasks: %+v", got)
	}
}
