package cli

import (
	"errors"
	"testing"
)

func TestChoice(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, err string
	}{
		{"listed", "RUNNING", "RUNNING", ""},
		{"any case, stored as listed", "running", "RUNNING", ""},
		{"mixed case", "Lost", "LOST", ""},
		{"not listed", "BOGUS", "", `"BOGUS" is not a task status: use PENDING, RUNNING, STOPPED or LOST`},
		{"empty is not a value", "", "", `"" is not a task status: use PENDING, RUNNING, STOPPED or LOST`},
		{"a prefix is not a value", "RUN", "", `"RUN" is not a task status: use PENDING, RUNNING, STOPPED or LOST`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v string
			c := NewChoice(&v, "", "a task status", "PENDING", "RUNNING", "STOPPED", "LOST")
			err := c.Set(tc.in)
			if tc.err != "" {
				var ce *ChoiceError
				if !errors.As(err, &ce) || err.Error() != tc.err {
					t.Fatalf("Set(%q) = %v, want %q", tc.in, err, tc.err)
				}
				if v != "" {
					t.Fatalf("a refused value was stored: %q", v)
				}
				return
			}
			if err != nil || v != tc.want || c.String() != tc.want {
				t.Fatalf("Set(%q) = %v, value %q, want %q", tc.in, err, v, tc.want)
			}
		})
	}
}

func TestChoiceDefaultAndZero(t *testing.T) {
	var v string
	c := NewChoice(&v, "table", "an output format", "table", "json", "yaml")
	if v != "table" || c.String() != "table" || c.Type() != "string" {
		t.Fatalf("default: %q %q %q", v, c.String(), c.Type())
	}
	if got := (&Choice{}).String(); got != "" { // pflag asks a zero value
		t.Fatalf("zero Choice: %q", got)
	}
	vals := c.Values()
	vals[0] = "changed"
	if c.Values()[0] != "table" {
		t.Fatal("Values shares the choice's slice")
	}
}

func TestOrList(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, "nothing"},
		{[]string{"daemon"}, "daemon"},
		{[]string{"a", "b"}, "a or b"},
		{[]string{"table", "json", "yaml"}, "table, json or yaml"},
	} {
		if got := orList(tc.in); got != tc.want {
			t.Errorf("orList(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
