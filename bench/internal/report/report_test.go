package report

import (
	"testing"
	"time"
)

func TestRound(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{1234567891 * time.Nanosecond, 1230 * time.Millisecond},
		{12345678 * time.Nanosecond, 12350 * time.Microsecond},
		{123456 * time.Nanosecond, 123 * time.Microsecond},
	} {
		if got := Round(tc.in); got != tc.want {
			t.Errorf("Round(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
