package command

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/scheduler"
)

// How the daemon scheduler's objects are shown: environments, versions,
// deployments, an environment's status and a diff. Each function writes
// already-decoded messages, so the tables are tested without a server.

// Deployment statuses (docs/scheduler.md).
const (
	DeploymentPending    = "pending"
	DeploymentInProgress = "in-progress"
	DeploymentCompleted  = "completed"
	DeploymentCanceled   = "canceled"
)

// DeploymentRunning reports whether a deployment has not ended yet.
func DeploymentRunning(d *pbscheduler.Deployment) bool {
	return d.GetStatus() == DeploymentPending || d.GetStatus() == DeploymentInProgress
}

// Progress is a deployment's progress the way the seed says it: "x/n
// complete", and the failed instances when there are any. A deployment
// with no instance to bring to its version says so in words, since "0/0
// complete" reads as success: not planned yet while it runs, "nothing
// placed" once it has ended.
func Progress(d *pbscheduler.Deployment) string {
	if d.GetTotal() == 0 {
		switch d.GetStatus() {
		case DeploymentPending:
			return "waiting to start"
		case DeploymentInProgress:
			return "planning"
		}
		return NothingPlaced
	}
	s := fmt.Sprintf("%d/%d complete", d.GetComplete(), d.GetTotal())
	if d.GetFailed() > 0 {
		s += fmt.Sprintf(", %d failed", d.GetFailed())
	}
	if d.GetBlocked() > 0 {
		s += fmt.Sprintf(", %d blocked", d.GetBlocked())
	}
	return s
}

// blockedReasons says why the instances a deployment lists as blocked
// are: "i2: host port 8080/tcp is taken by task web-1; i3: ...", at most
// five of them.
func blockedReasons(d *pbscheduler.Deployment) string {
	var parts []string
	for _, in := range d.GetInstances() {
		if in.GetState() == scheduler.StateBlocked && len(parts) < 5 {
			parts = append(parts, in.GetInstance()+": "+in.GetReason())
		}
	}
	if n := int(d.GetBlocked()) - len(parts); n > 0 && len(parts) > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", n))
	}
	return strings.Join(parts, "; ")
}

// NothingPlaced is the progress of a deployment that ended without an
// instance to place on.
const NothingPlaced = "nothing placed"

// nothingPlacedReason is why a completed deployment placed nothing: the
// server's reason ("nothing placed: no instance of the instance group
// ... is ready ..."), or, from a server that gives none, the gist of it.
func nothingPlacedReason(d *pbscheduler.Deployment) string {
	if r := d.GetStatusReason(); strings.HasPrefix(r, NothingPlaced) {
		return r
	}
	return NothingPlaced + ": no instance of the instance group was ready"
}

// PlacedNothing reports whether a deployment completed without placing
// anything: its version is the desired one, but runs nowhere yet.
func PlacedNothing(d *pbscheduler.Deployment) bool {
	return d.GetStatus() == DeploymentCompleted && d.GetTotal() == 0
}

// RolledBack says where auto_rollback took the environment after this
// deployment failed: "rolled back to version 1 (deployment 01jd…)", or ""
// when it did not.
func RolledBack(d *pbscheduler.Deployment) string {
	if d.GetRollbackDeployment() == "" {
		return ""
	}
	return fmt.Sprintf("rolled back to version %s (deployment %s)", versionNumber(d.GetRollbackVersionNumber()), d.GetRollbackDeployment())
}

// DeploymentStatus is a deployment's status, with the rollback it was
// followed by: "unhealthy, rolled back to version 1".
func DeploymentStatus(d *pbscheduler.Deployment) string {
	if d.GetRollbackDeployment() == "" {
		return cli.Dash(d.GetStatus())
	}
	return fmt.Sprintf("%s, rolled back to version %s", cli.Dash(d.GetStatus()), versionNumber(d.GetRollbackVersionNumber()))
}

// ProgressLine is one line of `trellis deploy --wait`: the status and the
// progress ("in-progress: 2/5 complete"); once it has ended other than
// completed, why, and the rollback that followed; for a deployment that
// completed placing nothing, why nothing was placed.
func ProgressLine(d *pbscheduler.Deployment) string {
	if PlacedNothing(d) {
		return cli.Dash(d.GetStatus()) + ": " + nothingPlacedReason(d)
	}
	s := cli.Dash(d.GetStatus()) + ": " + Progress(d)
	if d.GetStatus() == DeploymentCompleted && d.GetBlocked() > 0 {
		if why := blockedReasons(d); why != "" {
			s += " (" + why + ")"
		}
	}
	if DeploymentRunning(d) || d.GetStatus() == DeploymentCompleted {
		return s
	}
	if d.GetStatusReason() != "" {
		s += " (" + d.GetStatusReason() + ")"
	}
	if rb := RolledBack(d); rb != "" {
		s += "; " + rb
	}
	return s
}

// WaitResult is how `trellis deploy --wait` ends once the deployment has:
// nil when it completed with its version placed; otherwise an error that
// says how it ended, why, and what came next (the rollback to follow).
func WaitResult(env, id string, d *pbscheduler.Deployment) error {
	switch {
	case PlacedNothing(d):
		return fmt.Errorf("deployment %s of %s completed with %s", id, env, nothingPlacedReason(d))
	case d.GetStatus() == DeploymentCompleted:
		return nil
	}
	msg := fmt.Sprintf("deployment %s of %s ended %s: %s", id, env, cli.Dash(d.GetStatus()), cli.Dash(d.GetStatusReason()))
	if rb := d.GetRollbackDeployment(); rb != "" {
		msg += fmt.Sprintf("\nauto_rollback started deployment %s, which returns %s to version %s; follow it with: trellis deployment get %s %s",
			rb, env, versionNumber(d.GetRollbackVersionNumber()), env, rb)
	}
	return errors.New(msg)
}

// Summary is the status line of an environment, "5 desired: 2 active, 3
// launching, 1 unhealthy": the server's, or, from a server that sends
// none, the scheduler's own from the counts.
func Summary(st *pbscheduler.EnvironmentState) string {
	if st.GetSummary() != "" {
		return st.GetSummary()
	}
	return scheduler.Summary(st)
}

// versionNumber shows a version number, "-" when unknown.
func versionNumber(n int64) string {
	if n <= 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

// EnvironmentStatusWord is an environment's status (what the scheduler
// reports, s), saying when it is being deleted (what a user asked, e).
func EnvironmentStatusWord(e *pbscheduler.Environment, s *pbscheduler.EnvironmentStatus) string {
	if e.GetDeleting() {
		return "deleting"
	}
	return cli.Dash(s.GetStatus())
}

// DecodeEnvironmentStatus reads what the scheduler reports of an
// environment: the payload of its status key, nil when it has reported
// nothing yet.
func DecodeEnvironmentStatus(r *wire.Resource) (*pbscheduler.EnvironmentStatus, error) {
	raw, ok := r.Status[scheduler.StatusKey]
	if !ok {
		return nil, nil
	}
	var st pbresource.Status
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &st); err != nil {
		return nil, fmt.Errorf("environment %s: the server returned a status this CLI cannot read: %w", r.ID.Name, err)
	}
	if st.GetData() == nil {
		return nil, nil
	}
	var out pbscheduler.EnvironmentStatus
	if err := st.GetData().UnmarshalTo(&out); err != nil {
		return nil, fmt.Errorf("environment %s: the server returned a status this CLI cannot read: %w", r.ID.Name, err)
	}
	return &out, nil
}

// orInactive is s, or before the scheduler has reported on an
// environment, what that means: inactive and healthy, nothing deployed.
func orInactive(s *pbscheduler.EnvironmentStatus) *pbscheduler.EnvironmentStatus {
	if s == nil {
		return &pbscheduler.EnvironmentStatus{Status: scheduler.EnvInactive, Health: scheduler.HealthHealthy}
	}
	return s
}

// NotDeployed is the health of an environment that was never deployed:
// nothing it runs has been judged.
const NotDeployed = "not deployed"

// EnvironmentHealth is an environment's health: the server's (healthy,
// unhealthy), or "not deployed" before its first deployment, whatever the
// stored default says.
func EnvironmentHealth(s *pbscheduler.EnvironmentStatus) string {
	if s.GetDesiredVersion() == "" {
		return NotDeployed
	}
	return cli.Dash(s.GetHealth())
}

// desiredVersion names an environment's desired version: "1 (ls:3)", or
// "-" before its first deployment.
func desiredVersion(s *pbscheduler.EnvironmentStatus) string {
	if s.GetDesiredVersion() == "" {
		return "-"
	}
	if s.GetDesiredVersionNumber() > 0 {
		return describeVersion(s.GetDesiredVersionNumber(), "", s.GetDesiredTaskDefinition())
	}
	return describeVersion(0, s.GetDesiredVersion(), s.GetDesiredTaskDefinition()) // a server that sends no number
}

// NamedEnvironment is an environment, its name, and what the scheduler
// reports of it (nil before it has: inactive, not deployed).
type NamedEnvironment struct {
	Name   string
	Env    *pbscheduler.Environment
	Status *pbscheduler.EnvironmentStatus
}

// WriteEnvironments prints `trellis env list`: the desired version (what
// the scheduler keeps running) and the latest, each by number and task
// definition.
func WriteEnvironments(w io.Writer, envs []NamedEnvironment) error {
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, "NAME\tTYPE\tSTATUS\tHEALTH\tDESIRED\tLATEST\tDEPLOYING")
	for _, n := range envs {
		e, s := n.Env, orInactive(n.Status)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, cli.Dash(e.GetType()), EnvironmentStatusWord(e, s), EnvironmentHealth(s),
			desiredVersion(s), describeVersion(e.GetVersionCount(), "", e.GetTaskDefinition()), cli.Dash(s.GetActiveDeployment()))
	}
	return tw.Flush()
}

// DescribeInstanceGroup says an instance group in one line: "cluster
// default, role=logger, zone in (a,b)".
func DescribeInstanceGroup(g *pbscheduler.InstanceGroup) string {
	cluster := g.GetCluster()
	if cluster == "" {
		cluster = "default"
	}
	s := "cluster " + cluster
	if len(g.GetAttributes()) == 0 {
		return s + ", every instance"
	}
	return s + ", " + strings.Join(g.GetAttributes(), ", ")
}

// DescribeDeploymentConfig says how an environment rolls out, with the
// defaults of unset fields spelt out.
func DescribeDeploymentConfig(d *pbscheduler.DeploymentConfig) string {
	pct := int32(75)
	if d != nil && d.MinHealthyPercent != nil {
		pct = d.GetMinHealthyPercent()
	}
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	s := fmt.Sprintf("min healthy %d%%, healthy for %s, healthy deadline %s, progress deadline %s",
		pct, or(d.GetMinHealthyTime(), "0s"), or(d.GetHealthyDeadline(), "5m"), or(d.GetProgressDeadline(), "10m"))
	if d.GetAutoRollback() {
		s += ", auto rollback"
	}
	return s
}

// EnvironmentView is what `trellis env get` shows.
type EnvironmentView struct {
	Name, Namespace string
	Env             *pbscheduler.Environment
	// Status is what the scheduler reports (nil before it has).
	Status *pbscheduler.EnvironmentStatus
	State  *pbscheduler.EnvironmentState // nil when the server sent none
	// ActiveID and Active are the deployment in progress, if any.
	ActiveID string
	Active   *pbscheduler.Deployment
	// Desired is the desired version's spec: nil before the first
	// deployment, or from a server that does not send it.
	Desired *pbscheduler.EnvironmentVersion
}

// WriteEnvironment prints `trellis env get`. The spec shown is what runs:
// the desired version's. The environment's own spec fields are its latest
// version's, which differs after a rollback or an update not yet
// deployed; the latest version is then named apart.
func WriteEnvironment(w io.Writer, v EnvironmentView) error {
	e, s := v.Env, orInactive(v.Status)
	deployed := s.GetDesiredVersion() != ""
	taskdef, group, config, role := e.GetTaskDefinition(), e.GetInstanceGroup(), e.GetDeployment(), e.GetRole()
	switch {
	case v.Desired != nil:
		taskdef, group, config, role = v.Desired.GetTaskDefinition(), v.Desired.GetInstanceGroup(), v.Desired.GetDeployment(), v.Desired.GetRole()
	case deployed:
		taskdef = s.GetDesiredTaskDefinition()
	}
	tw := cli.NewTable(w)
	fmt.Fprintf(tw, "Environment:\t%s\n", v.Name)
	fmt.Fprintf(tw, "Namespace:\t%s\n", cli.Dash(v.Namespace))
	fmt.Fprintf(tw, "Type:\t%s\n", cli.Dash(e.GetType()))
	fmt.Fprintf(tw, "Status:\t%s\n", EnvironmentStatusWord(e, s))
	fmt.Fprintf(tw, "Health:\t%s\n", EnvironmentHealth(s))
	if deployed {
		fmt.Fprintf(tw, "Desired version:\t%s\n", describeVersion(s.GetDesiredVersionNumber(), s.GetDesiredVersion(), s.GetDesiredTaskDefinition()))
	} else {
		fmt.Fprintf(tw, "Desired version:\tnone: never deployed (trellis deploy %s)\n", v.Name)
	}
	fmt.Fprintf(tw, "Task definition:\t%s\n", cli.Dash(taskdef))
	fmt.Fprintf(tw, "Instance group:\t%s\n", DescribeInstanceGroup(group))
	fmt.Fprintf(tw, "Deployment:\t%s\n", DescribeDeploymentConfig(config))
	if role != "" {
		fmt.Fprintf(tw, "Role:\t%s\n", role)
	}
	latest := describeVersion(e.GetVersionCount(), e.GetLatestVersion(), e.GetTaskDefinition())
	if deployed && e.GetLatestVersion() != s.GetDesiredVersion() {
		latest += fmt.Sprintf(", not desired: trellis env diff %s shows what deploying it would change", v.Name)
	}
	fmt.Fprintf(tw, "Latest version:\t%s\n", latest)
	if s.GetLastCompletedVersion() != "" {
		fmt.Fprintf(tw, "Last completed:\t%s\n", describeVersion(s.GetLastCompletedVersionNumber(), s.GetLastCompletedVersion(), ""))
	}
	switch {
	case v.Active != nil:
		fmt.Fprintf(tw, "Deploying:\t%s, version %s, %s: %s\n", v.ActiveID, versionNumber(v.Active.GetVersionNumber()), cli.Dash(v.Active.GetStatus()), Progress(v.Active))
	case s.GetActiveDeployment() != "":
		fmt.Fprintf(tw, "Deploying:\t%s\n", s.GetActiveDeployment())
	default:
		fmt.Fprintf(tw, "Deploying:\tnothing\n")
	}
	if v.State != nil {
		fmt.Fprintf(tw, "Tasks:\t%s\n", Summary(v.State))
	}
	if t := e.GetCreatedAt(); t != nil {
		fmt.Fprintf(tw, "Created:\t%s\n", FormatTime(t))
	}
	if t := e.GetUpdatedAt(); t != nil {
		fmt.Fprintf(tw, "Updated:\t%s\n", FormatTime(t))
	}
	return tw.Flush()
}

// describeVersion says "3 (uuid)", "uuid (web:3)" or "3 (uuid, web:3)":
// the number when known, else the id, then what else is known.
func describeVersion(number int64, id, taskdef string) string {
	head, rest := id, []string{}
	if number > 0 {
		head = strconv.FormatInt(number, 10)
		if id != "" {
			rest = append(rest, id)
		}
	}
	if taskdef != "" {
		rest = append(rest, taskdef)
	}
	if len(rest) == 0 {
		return cli.Dash(head)
	}
	return cli.Dash(head) + " (" + strings.Join(rest, ", ") + ")"
}

// FormatTime shows a timestamp in local time, to the millisecond.
func FormatTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().Local().Format("2006-01-02 15:04:05.000")
}

// WriteEnvironmentStatus prints `trellis env status`: the summary line
// first, exactly as the server says it, then the tasks of each version,
// then every instance.
func WriteEnvironmentStatus(w io.Writer, st *pbscheduler.EnvironmentState) error {
	fmt.Fprintln(w, Summary(st))
	if len(st.GetVersions()) > 0 {
		fmt.Fprintln(w)
		tw := cli.NewTable(w)
		fmt.Fprintln(tw, "VERSION\tTASKDEF\tTASKS\tHEALTHY")
		for _, v := range st.GetVersions() {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", versionNumber(v.GetVersionNumber()), cli.Dash(v.GetTaskDefinition()), v.GetTasks(), v.GetHealthy())
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(st.GetInstances()) == 0 {
		fmt.Fprintln(w, "\nNo instance matches the instance group.")
		return nil
	}
	fmt.Fprintln(w)
	// The reason column shows only when an instance has one (it is
	// blocked): the table of a daemon that runs everywhere stays as it was.
	reasons := slices.ContainsFunc(st.GetInstances(), func(in *pbscheduler.InstanceState) bool { return in.GetReason() != "" })
	tw := cli.NewTable(w)
	header := "INSTANCE\tVERSION\tTASKDEF\tTASK\tSTATE\tHEALTH"
	if reasons {
		header += "\tREASON"
	}
	fmt.Fprintln(tw, header)
	for _, in := range st.GetInstances() {
		state := cli.Dash(in.GetState())
		if !in.GetMatches() {
			state += " (no longer matches)"
		}
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", in.GetInstance(), versionNumber(in.GetVersionNumber()), cli.Dash(in.GetTaskDefinition()),
			cli.Dash(in.GetTask()), state, cli.Dash(in.GetHealth()))
		if reasons {
			row += "\t" + cli.Dash(in.GetReason())
		}
		fmt.Fprintln(tw, row)
	}
	return tw.Flush()
}

// WriteDiff prints `trellis env diff`: what deploying the version would
// do, counted, then instance by instance.
func WriteDiff(w io.Writer, d *pbscheduler.EnvironmentDiff) error {
	blocked := ""
	if d.GetBlocked() > 0 {
		blocked = fmt.Sprintf(", and is blocked on %d", d.GetBlocked())
	}
	fmt.Fprintf(w, "Deploying version %s would place %d, replace %d, stop %d, keep %d%s.\n",
		describeVersion(d.GetVersionNumber(), d.GetVersion(), d.GetTaskDefinition()), d.GetPlace(), d.GetReplace(), d.GetStop(), d.GetKeep(), blocked)
	if len(d.GetChanges()) == 0 {
		fmt.Fprintln(w, "No instance matches the instance group, and no task runs: nothing to do.")
		return nil
	}
	fmt.Fprintln(w)
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, "INSTANCE\tACTION\tFROM\tTO\tREASON")
	for _, c := range d.GetChanges() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.GetInstance(), c.GetAction(), cli.Dash(c.GetFromTaskDefinition()), cli.Dash(c.GetToTaskDefinition()), cli.Dash(c.GetReason()))
	}
	return tw.Flush()
}

// NamedVersion is an environment version and its id.
type NamedVersion struct {
	ID string
	V  *pbscheduler.EnvironmentVersion
}

// WriteVersions prints `trellis env versions`, marking the latest and the
// desired (deployed) version.
func WriteVersions(w io.Writer, versions []NamedVersion, latest, desired string) error {
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, "VERSION\tID\tTASKDEF\tINSTANCE GROUP\tCREATED\t")
	for _, n := range versions {
		var marks []string
		if n.ID == latest {
			marks = append(marks, "latest")
		}
		if n.ID == desired {
			marks = append(marks, "desired")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", versionNumber(n.V.GetNumber()), n.ID, cli.Dash(n.V.GetTaskDefinition()),
			DescribeInstanceGroup(n.V.GetInstanceGroup()), FormatTime(n.V.GetCreatedAt()), strings.Join(marks, ","))
	}
	return tw.Flush()
}

// NamedDeployment is a deployment and its id.
type NamedDeployment struct {
	ID string
	D  *pbscheduler.Deployment
}

// WriteDeployments prints `trellis deployment list`.
func WriteDeployments(w io.Writer, deps []NamedDeployment, now time.Time) error {
	tw := cli.NewTable(w)
	fmt.Fprintln(tw, "ID\tTYPE\tVERSION\tTASKDEF\tSTATUS\tPROGRESS\tAGE")
	for _, n := range deps {
		d := n.D
		age := "-"
		if t := d.GetCreatedAt(); t != nil {
			age = cli.FormatAge(now.Sub(t.AsTime()))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.ID, cli.Dash(d.GetType()), versionNumber(d.GetVersionNumber()), cli.Dash(d.GetTaskDefinition()),
			DeploymentStatus(d), Progress(d), age)
	}
	return tw.Flush()
}

// WriteDeployment prints `trellis deployment get`.
func WriteDeployment(w io.Writer, id string, d *pbscheduler.Deployment) error {
	tw := cli.NewTable(w)
	fmt.Fprintf(tw, "Deployment:\t%s\n", id)
	fmt.Fprintf(tw, "Environment:\t%s\n", d.GetEnvironment())
	fmt.Fprintf(tw, "Type:\t%s\n", cli.Dash(d.GetType()))
	fmt.Fprintf(tw, "Version:\t%s\n", describeVersion(d.GetVersionNumber(), d.GetVersion(), d.GetTaskDefinition()))
	fmt.Fprintf(tw, "Status:\t%s\n", DeploymentStatus(d))
	if d.GetStatusReason() != "" {
		fmt.Fprintf(tw, "Reason:\t%s\n", d.GetStatusReason())
	}
	fmt.Fprintf(tw, "Progress:\t%s\n", Progress(d))
	if d.GetBatchSize() > 0 {
		fmt.Fprintf(tw, "Batch size:\t%d\n", d.GetBatchSize())
	}
	if rb := d.GetRollbackDeployment(); rb != "" {
		fmt.Fprintf(tw, "Rolled back by:\t%s\n", rb)
	}
	if d.GetRollbackOf() != "" {
		fmt.Fprintf(tw, "Rollback of:\t%s\n", d.GetRollbackOf())
	}
	fmt.Fprintf(tw, "Created:\t%s\n", FormatTime(d.GetCreatedAt()))
	if d.GetStartTime() != nil {
		fmt.Fprintf(tw, "Started:\t%s\n", FormatTime(d.GetStartTime()))
	}
	if d.GetEndTime() != nil {
		fmt.Fprintf(tw, "Ended:\t%s\n", FormatTime(d.GetEndTime()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.GetInstances()) == 0 {
		return nil
	}
	notComplete := int(d.GetTotal() - d.GetComplete() + d.GetBlocked())
	fmt.Fprintln(w)
	if len(d.GetInstances()) < notComplete {
		fmt.Fprintf(w, "%d of the %d instances not yet complete:\n", len(d.GetInstances()), notComplete)
	}
	tw = cli.NewTable(w)
	fmt.Fprintln(tw, "INSTANCE\tSTATE\tTASK\tREASON")
	for _, in := range d.GetInstances() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", in.GetInstance(), cli.Dash(in.GetState()), cli.Dash(in.GetTask()), cli.Dash(in.GetReason()))
	}
	return tw.Flush()
}
