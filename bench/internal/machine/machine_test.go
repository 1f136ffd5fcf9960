package machine

import (
	"testing"
	"time"
)

func TestBusyTicks(t *testing.T) {
	for _, tc := range []struct {
		line string
		want int64
		ok   bool
	}{
		// user nice system idle iowait irq softirq steal guest guest_nice
		{"cpu  100 2 30 5000 70 4 5 6 40 1", 100 + 2 + 30 + 4 + 5 + 6, true},
		{"cpu  100 2 30 5000 70 4 5", 100 + 2 + 30 + 4 + 5, true}, // older kernels: no steal, no guest
		{"cpu0 100 2 30 5000 70 4 5 6 40 1", 0, false},
		{"cpu  100 2 30", 0, false},
		{"cpu  100 x 30 5000 70 4 5 6 40 1", 0, false},
		{"", 0, false},
	} {
		got, err := busyTicks(tc.line)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("busyTicks(%q) = %d, %v; want %d (ok %v)", tc.line, got, err, tc.want, tc.ok)
		}
	}
}

// TestBusyTimeGrows: the machine's busy time is read, and grows while this
// process works.
func TestBusyTimeGrows(t *testing.T) {
	before, err := BusyTime()
	if err != nil {
		t.Fatal(err)
	}
	for after := before; after <= before; {
		for range 1_000_000 {
			_ = time.Now()
		}
		if after, err = BusyTime(); err != nil {
			t.Fatal(err)
		}
	}
}
