package main

import (
	"regexp"
	"strings"
	"testing"
)

const sleeperSpec = `{family: sleeper, containers: [{name: main, driver: exec, command: [/bin/sh, -c, "exec sleep 600"]}]}`

// The daemon scheduler from the command line, against a real dev server
// with two local agents: create an environment limited by an attribute,
// see the diff, deploy and wait, read status; widen it and roll out; roll
// back; refusals; delete.
func TestSchedulerCommands(t *testing.T) {
	addr := startDev(t, "-instances", "2")
	vars := map[string]string{"TRELLIS_ADDR": addr}
	expect := expecter(t, addr)
	waitFor(t, "both local instances are ready", func() bool {
		_, out, _ := run(t, "", vars, "instance", "list")
		return strings.Count(out, " ready ") == 2
	})
	expect(0, sleeperSpec, "registered sleeper:1", "taskdef", "register", "-f", "-")

	expect(0, "", "No environments", "env", "list")
	expect(0, "", "environment ls created: version 1 (", "env", "create", "ls", "--taskdef", "sleeper:1",
		"--attribute", "zone in (zone-1)", "--min-healthy-percent", "50")
	expect(0, "", "Desired version:   none: never deployed", "env", "get", "ls")
	expect(0, "", "Health:            not deployed", "env", "get", "ls")
	if out := expect(0, "", "ls ", "env", "list"); !regexp.MustCompile(`(?m)^ls\s+daemon\s+inactive\s+not deployed\s+-\s+1 \(sleeper:1\)`).MatchString(out) {
		t.Errorf("env list of an environment never deployed:\n%s", out)
	}
	expect(0, "", "would place 1, replace 0, stop 0, keep 0", "env", "diff", "ls")
	out := expect(0, "", "completed: 1/1 complete", "deploy", "ls", "--wait")
	if !regexp.MustCompile(`(?m)^deployment \S+ of ls version 1 \(sleeper:1\)$`).MatchString(out) {
		t.Errorf("deploy --wait did not say what it deploys:\n%s", out)
	}
	out = expect(0, "", "dev-1", "env", "status", "ls")
	if first := strings.SplitN(out, "\n", 2)[0]; first != "1 desired: 1 active, 0 launching, 0 unhealthy" {
		t.Errorf("status line %q, want %q\n%s", first, "1 desired: 1 active, 0 launching, 0 unhealthy", out)
	}
	if strings.Contains(out, "dev-2") {
		t.Errorf("dev-2 does not match zone-1 but shows in the status:\n%s", out)
	}
	expect(0, "", "ls     daemon   active", "env", "list", "--type", "daemon")
	expect(0, "", `"summary": "1 desired: 1 active, 0 launching, 0 unhealthy"`, "env", "status", "ls", "-o", "json")
	// What the scheduler reports is the environment's status, typed: the
	// resource views show it with its @type.
	out = expect(0, "", `"@type": "type.googleapis.com/trellis.scheduler.v1.EnvironmentStatus"`, "resource", "get", "scheduler/v1/Environment", "ls", "-o", "json")
	if !strings.Contains(out, `"daemon-scheduler": {`) || !strings.Contains(out, `"status": "active"`) {
		t.Errorf("resource get does not show the scheduler's status of ls:\n%s", out)
	}

	// Widen the group: a new version, a diff that places on dev-2 only.
	expect(0, "", "environment ls updated: version 2 (", "env", "update", "ls", "--attribute", "zone in (zone-1,zone-2)")
	expect(0, "", "environment ls unchanged: still version 2", "env", "update", "ls", "--attribute", "zone in (zone-1,zone-2)")
	out = expect(0, "", "would place 1, replace 0, stop 0, keep 1", "env", "diff", "ls")
	if !regexp.MustCompile(`dev-2\s+place`).MatchString(out) || !regexp.MustCompile(`dev-1\s+keep`).MatchString(out) {
		t.Errorf("diff:\n%s", out)
	}
	out = expect(0, "", "latest", "env", "versions", "ls")
	if !regexp.MustCompile(`(?m)^2\s.*latest$`).MatchString(out) || !regexp.MustCompile(`(?m)^1\s.*desired$`).MatchString(out) {
		t.Errorf("versions do not mark latest and desired:\n%s", out)
	}
	expect(0, "", "completed: 2/2 complete", "deploy", "ls", "--version", "2", "--wait")
	waitFor(t, "both instances run it", func() bool {
		_, out, _ := run(t, "", vars, "env", "status", "ls")
		return strings.HasPrefix(out, "2 desired: 2 active, 0 launching, 0 unhealthy\n")
	})
	out = expect(0, "", "completed", "deployment", "list", "ls")
	if strings.Count(out, "completed") < 2 || strings.Index(out, "2/2 complete") > strings.Index(out, "1/1 complete") {
		t.Errorf("deployment list is not latest first:\n%s", out)
	}
	id := regexp.MustCompile(`(?m)^(\S+)\s+user\s+2\s`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no user deployment of version 2 in:\n%s", out)
	}
	expect(0, "", "Progress:      2/2 complete", "deployment", "get", "ls", id[1])
	expect(0, "", `"status": "completed"`, "deployment", "get", "ls", id[1], "-o", "json")

	// A new task definition rolls out by handover: each new task names
	// the one it replaces, which is stopped.
	expect(0, strings.Replace(sleeperSpec, "sleep 600", "sleep 601", 1), "registered sleeper:2", "taskdef", "register", "-f", "-")
	expect(0, "", "environment ls updated: version 3 (", "env", "update", "ls", "--taskdef", "sleeper:2")
	expect(0, "", "completed: 2/2 complete", "deploy", "ls", "--wait")
	out = expect(0, "", "sleeper:2", "task", "list", "--instance", "dev-1")
	name := regexp.MustCompile(`(?m)^(ls-\S+)\s.*sleeper:2\s+dev-1\s+RUNNING\s+RUNNING`).FindStringSubmatch(out)
	if name == nil {
		t.Fatalf("no running sleeper:2 task on dev-1 in:\n%s", out)
	}
	// A task without health checks reads healthy in every view.
	if !regexp.MustCompile(`(?m)^` + name[1] + `\s.*RUNNING\s+RUNNING\s+healthy\s`).MatchString(out) {
		t.Errorf("task list does not call the running task without checks healthy:\n%s", out)
	}
	out = expect(0, "", "Replaces:", "task", "show", name[1])
	if !regexp.MustCompile(`Environment:\s+ls, version 3, deployment \S+\n`).MatchString(out) {
		t.Errorf("task show does not name the environment and its version number:\n%s", out)
	}
	if !strings.Contains(out, "Health:            healthy (no health checks: healthy once it runs)") {
		t.Errorf("task show health:\n%s", out)
	}
	if out := expect(0, "", "dev-1", "env", "status", "ls"); !regexp.MustCompile(`(?m)^dev-1\s.*` + name[1] + `\s+active\s+healthy$`).MatchString(out) {
		t.Errorf("env status does not call the task healthy:\n%s", out)
	}

	// Roll back to version 1: the task on dev-2 is stopped.
	expect(0, "", "completed", "rollback", "ls", "--version", "1", "--wait")
	waitFor(t, "only dev-1 runs it again", func() bool {
		_, out, _ := run(t, "", vars, "env", "status", "ls")
		return strings.HasPrefix(out, "1 desired: 1 active, 0 launching, 0 unhealthy\n")
	})

	// After the rollback, env get shows what runs: version 1 and its task
	// definition; the latest version is named apart.
	out = expect(0, "", "Desired version:   1 (", "env", "get", "ls")
	for _, want := range []string{"Task definition:   sleeper:1\n", "Instance group:    cluster default, zone in (zone-1)\n", "Latest version:    3 ("} {
		if !strings.Contains(out, want) {
			t.Errorf("env get after the rollback lacks %q:\n%s", want, out)
		}
	}

	// A deployment that fails is followed by auto_rollback, and --wait
	// says so, naming the version it returns to. min_healthy_time makes
	// the failure certain: without it a task that runs an instant before
	// it exits counts as healthy whenever the scheduler reads the report of
	// its start before the report of its exit, which under load it did
	// (about one run in five with -race on a busy machine).
	expect(0, strings.Replace(sleeperSpec, "sleeper", "idle", 1), "registered idle:1", "taskdef", "register", "-f", "-")
	expect(0, strings.NewReplacer("sleeper", "idle", "exec sleep 600", "exit 3").Replace(sleeperSpec), "registered idle:2", "taskdef", "register", "-f", "-")
	expect(0, "", "environment rb created: version 1", "env", "create", "rb", "--taskdef", "idle:1", "--attribute", "zone in (zone-2)",
		"--min-healthy-percent", "0", "--min-healthy-time", "1s", "--auto-rollback")
	expect(0, "", "completed: 1/1 complete", "deploy", "rb", "--wait")
	expect(0, "", "environment rb updated: version 2", "env", "update", "rb", "--taskdef", "idle:2")
	code, out, errOut := run(t, "", vars, "deploy", "rb", "--wait")
	if code != 1 || !regexp.MustCompile(`(?m)^unhealthy: 0/1 complete, 1 failed \(task \S+ on instance dev-2 stopped: .*exited with code 3\); rolled back to version 1 \(deployment \S+\)$`).MatchString(out) ||
		!strings.Contains(errOut, "auto_rollback started deployment ") || !strings.Contains(errOut, ", which returns rb to version 1; follow it with: trellis deployment get rb ") {
		t.Errorf("deploy --wait of a failing version does not say it rolled back: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	waitFor(t, "the rollback completes", func() bool {
		_, out, _ := run(t, "", vars, "env", "get", "rb")
		return strings.Contains(out, "Deploying:         nothing") && strings.Contains(out, "Last completed:    1 (")
	})
	out = expect(0, "", "Desired version:   1 (", "env", "get", "rb")
	if !strings.Contains(out, "Task definition:   idle:1\n") || !strings.Contains(out, "Latest version:    2 (") || !strings.Contains(out, "idle:2), not desired") {
		t.Errorf("env get after the auto rollback:\n%s", out)
	}
	expect(0, "", "unhealthy, rolled back to version 1", "deployment", "list", "rb")

	// A deployment to a group no instance is in completes, placing
	// nothing: --wait says so and why, and fails.
	expect(0, "", "environment none created", "env", "create", "none", "--taskdef", "sleeper:2", "--attribute", "zone in (zone-9)")
	out = expect(1, "", "completed with nothing placed: no instance is in the instance group (cluster default, zone in (zone-9))", "deploy", "none", "--wait")
	if !strings.Contains(out, "completed: nothing placed: no instance is in the instance group") || strings.Contains(out, "0/0") {
		t.Errorf("deploy --wait to no instance:\n%s", out)
	}
	expect(0, "", "nothing placed", "deployment", "list", "none")

	// Refusals, each naming what is wrong; nothing changes.
	expect(1, "", "has no deployment in progress", "deployment", "stop", "ls")
	expect(1, "", "ls", "env", "create", "ls", "--taskdef", "sleeper:1")
	expect(1, "", "task_definition", "env", "create", "other", "--taskdef", "nosuch:1")
	expect(1, "", "trellis env list shows the environments", "env", "get", "nosuch")
	expect(1, "", "", "deploy", "ls", "--version", "9")
	expect(1, "", "trellis deployment list ls", "deployment", "get", "ls", "nosuch")
	// The generic delete would skip the environment's own (issue 23): it
	// points there instead.
	expect(1, "", "use DELETE /v1/environments/{name} (trellis env delete)", "resource", "delete", "scheduler/v1/Environment", "ls")
	expect(0, "", "ls ", "env", "list")

	expect(0, "", "environment ls is being deleted", "env", "delete", "ls")
	expect(0, "", "environment rb is being deleted", "env", "delete", "rb")
	expect(0, "", "environment none is being deleted", "env", "delete", "none")
	waitFor(t, "it is gone", func() bool {
		_, out, _ := run(t, "", vars, "env", "list")
		return strings.Contains(out, "No environments")
	})
}
