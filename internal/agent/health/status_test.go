package health

import (
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func TestTrackerRecord(t *testing.T) {
	type probe struct {
		at   time.Duration // after the container started
		pass bool
		want Status
	}
	tests := []struct {
		name   string
		check  Check
		probes []probe
	}{
		{
			name:  "starts unknown and a pass makes it healthy",
			check: Check{TCP: "127.0.0.1:1", Retries: 3},
			probes: []probe{
				{at: 5 * time.Second, pass: true, want: Healthy},
			},
		},
		{
			name:  "retries consecutive failures make it unhealthy",
			check: Check{TCP: "127.0.0.1:1", Retries: 3},
			probes: []probe{
				{at: 1 * time.Second, want: Unknown},
				{at: 2 * time.Second, want: Unknown},
				{at: 3 * time.Second, want: Unhealthy},
			},
		},
		{
			name:  "a pass clears the count",
			check: Check{TCP: "127.0.0.1:1", Retries: 2},
			probes: []probe{
				{at: 1 * time.Second, pass: true, want: Healthy},
				{at: 2 * time.Second, want: Healthy},
				{at: 3 * time.Second, pass: true, want: Healthy},
				{at: 4 * time.Second, want: Healthy},
				{at: 5 * time.Second, want: Unhealthy},
				{at: 6 * time.Second, pass: true, want: Healthy},
			},
		},
		{
			name:  "failures in the start period are not counted",
			check: Check{TCP: "127.0.0.1:1", Retries: 1, StartPeriod: 10 * time.Second},
			probes: []probe{
				{at: 1 * time.Second, want: Unknown},
				{at: 5 * time.Second, want: Unknown},
				{at: 9 * time.Second, want: Unknown},
				{at: 10 * time.Second, want: Unhealthy},
			},
		},
		{
			name:  "a pass ends the start period early",
			check: Check{TCP: "127.0.0.1:1", Retries: 2, StartPeriod: time.Minute},
			probes: []probe{
				{at: 1 * time.Second, want: Unknown},
				{at: 2 * time.Second, pass: true, want: Healthy},
				{at: 3 * time.Second, want: Healthy},
				{at: 4 * time.Second, want: Unhealthy},
			},
		},
		{
			name:  "zero retries take the default of 3",
			check: Check{TCP: "127.0.0.1:1"},
			probes: []probe{
				{at: 1 * time.Second, want: Unknown},
				{at: 2 * time.Second, want: Unknown},
				{at: 3 * time.Second, want: Unhealthy},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTracker(t0)
			if tr.Status != Unknown {
				t.Fatalf("new tracker is %s, want UNKNOWN", tr.Status)
			}
			for i, p := range tt.probes {
				tr = tr.Record(tt.check, Result{Pass: p.pass, Output: "x"}, t0.Add(p.at))
				if tr.Status != p.want {
					t.Fatalf("after probe %d (at %s, pass %v): %s, want %s", i, p.at, p.pass, tr.Status, p.want)
				}
			}
		})
	}
}

func TestTrackerBoundsOutput(t *testing.T) {
	long := make([]byte, 10*maxOutput)
	for i := range long {
		long[i] = 'a'
	}
	tr := NewTracker(t0).Record(Check{TCP: "h:1"}, Result{Output: string(long)}, t0)
	if len(tr.Output) > maxOutput+len("…") {
		t.Fatalf("output kept %d bytes, want at most %d", len(tr.Output), maxOutput)
	}
}

func TestNextProbe(t *testing.T) {
	c := Check{TCP: "h:1", Interval: 10 * time.Second, StartPeriod: 5 * time.Second}
	tests := []struct {
		name   string
		c      Check
		passed bool
		at     time.Duration
		want   time.Duration
	}{
		{"quick in the start period", c, false, 0, time.Second},
		{"quick until the start period ends", c, false, 4 * time.Second, 5 * time.Second},
		{"interval after the start period", c, false, 5 * time.Second, 15 * time.Second},
		{"interval once passed", c, true, 2 * time.Second, 12 * time.Second},
		{"no start period", Check{TCP: "h:1", Interval: 10 * time.Second}, false, 0, 10 * time.Second},
		{"start interval never longer than interval",
			Check{TCP: "h:1", Interval: 200 * time.Millisecond, StartPeriod: time.Minute}, false, 0, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NextProbe(tt.c, t0, tt.passed, t0.Add(tt.at)).Sub(t0)
			if got != tt.want {
				t.Fatalf("next probe at %s, want %s", got, tt.want)
			}
		})
	}
}

func TestCheckValidate(t *testing.T) {
	tests := []struct {
		name    string
		c       Check
		wantErr string // a substring; "" for valid
	}{
		{"command", Check{Command: []string{"true"}}, ""},
		{"http", Check{HTTP: "http://127.0.0.1:8080/healthz"}, ""},
		{"tcp", Check{TCP: "127.0.0.1:8080"}, ""},
		{"none", Check{}, "exactly one"},
		{"two", Check{TCP: "h:1", HTTP: "http://h/"}, "exactly one"},
		{"empty program", Check{Command: []string{""}}, "command:"},
		{"http scheme", Check{HTTP: "ftp://h/"}, "http:"},
		{"http no host", Check{HTTP: "http:///x"}, "http:"},
		{"tcp no port", Check{TCP: "127.0.0.1"}, "tcp:"},
		{"tcp bad port", Check{TCP: "127.0.0.1:99999"}, "tcp:"},
		{"tcp no host", Check{TCP: ":80"}, "tcp:"},
		{"negative interval", Check{TCP: "h:1", Interval: -1}, "interval:"},
		{"negative retries", Check{TCP: "h:1", Retries: -1}, "retries:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want one with %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q does not name %q", err, tt.wantErr)
			}
		})
	}
}
