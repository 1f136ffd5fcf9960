package command

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/client"
)

// followDeployment over a scripted sequence of reads: a line is printed
// only when it changes, transient errors are ridden out, a refusal of the
// server's ends it, and it returns the deployment as it ended.
func TestFollowDeployment(t *testing.T) {
	dep := func(status string, complete, failed int32) *pbscheduler.Deployment {
		return &pbscheduler.Deployment{Status: status, Total: 4, Complete: complete, Failed: failed, StatusReason: "why"}
	}
	unavailable := &client.APIError{StatusCode: http.StatusServiceUnavailable, Message: "no leader"}
	notFound := &client.APIError{StatusCode: http.StatusNotFound, Code: "not_found", Message: "deployment d9 not found"}
	type read struct {
		d   *pbscheduler.Deployment
		err error
	}
	for _, tc := range []struct {
		name    string
		reads   []read
		want    string // the lines printed
		status  string // how it ended, or the error
		pauses  int
		wantErr error
	}{
		{"completes", []read{{d: dep("pending", 0, 0)}, {d: dep("pending", 0, 0)}, {d: dep("in-progress", 0, 0)}, {d: dep("in-progress", 2, 0)},
			{d: dep("in-progress", 2, 0)}, {d: dep("completed", 4, 0)}},
			"pending: 0/4 complete\nin-progress: 0/4 complete\nin-progress: 2/4 complete\ncompleted: 4/4 complete\n", "completed", 5, nil},
		{"fails", []read{{d: dep("in-progress", 1, 0)}, {d: dep("in-progress", 1, 1)}, {d: dep("unhealthy", 1, 1)}},
			"in-progress: 1/4 complete\nin-progress: 1/4 complete, 1 failed\nunhealthy: 1/4 complete, 1 failed (why)\n", "unhealthy", 2, nil},
		{"rides out a leader change", []read{{d: dep("in-progress", 1, 0)}, {err: unavailable}, {err: unavailable}, {d: dep("completed", 4, 0)}},
			"in-progress: 1/4 complete\ncompleted: 4/4 complete\n", "completed", 3, nil},
		{"a refusal ends it", []read{{d: dep("in-progress", 1, 0)}, {err: notFound}},
			"in-progress: 1/4 complete\n", "", 1, notFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			i, pauses := 0, 0
			got, err := followDeployment(context.Background(), &out, func(context.Context) (*pbscheduler.Deployment, error) {
				r := tc.reads[i]
				i++
				return r.d, r.err
			}, func(context.Context) error { pauses++; return nil })
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if out.String() != tc.want {
				t.Errorf("printed:\n%s\nwant:\n%s", out.String(), tc.want)
			}
			if got.GetStatus() != tc.status || pauses != tc.pauses || i != len(tc.reads) {
				t.Errorf("ended %q after %d pauses and %d reads; want %q, %d, %d", got.GetStatus(), pauses, i, tc.status, tc.pauses, len(tc.reads))
			}
		})
	}

	// A server that stays away is given up on.
	reads := 0
	_, err := followDeployment(context.Background(), &strings.Builder{}, func(context.Context) (*pbscheduler.Deployment, error) {
		reads++
		return nil, errors.New("connection refused")
	}, func(context.Context) error { return nil })
	if err == nil || reads != maxPollFailures {
		t.Fatalf("gave up after %d reads with %v; want %d", reads, err, maxPollFailures)
	}

	// Ctrl-C: the pause returns the context's error.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = followDeployment(ctx, &strings.Builder{}, func(context.Context) (*pbscheduler.Deployment, error) {
		return dep("in-progress", 0, 0), nil
	}, sleepFor(pollEvery))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v", err)
	}
}
