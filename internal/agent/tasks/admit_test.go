package tasks

import (
	"strings"
	"testing"

	pborch "trellis.dev/trellis/api/orchestrator/v1"
	"trellis.dev/trellis/internal/orchestrator"
)

func TestAdmitOneDaemonCopy(t *testing.T) {
	task := func(ns, name, env string) Assignment {
		return Assignment{ID: orchestrator.TaskID(ns, name), Task: &pborch.Task{Environment: env}}
	}
	for _, tc := range []struct {
		name      string
		candidate Assignment
		live      []Assignment
		refuse    string
	}{
		{"a task run by hand", task("default", "t1", ""), []Assignment{task("default", "t0", "")}, ""},
		{"the first of its environment", task("default", "ls-1", "ls"), []Assignment{task("default", "web-1", "web")}, ""},
		{"the same name in another namespace", task("default", "ls-1", "ls"), []Assignment{task("team", "ls-1", "ls")}, ""},
		{"a second copy", task("default", "ls-2", "ls"), []Assignment{task("default", "ls-1", "ls")}, "task ls-1 of environment ls already runs on this instance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := AdmitOneDaemonCopy(tc.candidate, tc.live)
			switch {
			case tc.refuse == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refuse != "" && (err == nil || !strings.Contains(err.Error(), tc.refuse)):
				t.Fatalf("got %v, want a refusal containing %q", err, tc.refuse)
			}
		})
	}
}
