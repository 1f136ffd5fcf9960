package command

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	pbscheduler "trellis.dev/trellis/api/scheduler/v1"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
	"trellis.dev/trellis/internal/scheduler"
	schedclient "trellis.dev/trellis/internal/scheduler/client"
)

// An environment's spec comes from a file (`trellis env create -f`) or
// from flags (`trellis env create NAME --taskdef ...`). Both are checked
// here, before anything is sent, by the same rules; an error names the
// field as the user wrote it: a path in the file
// (deployment.min_healthy_percent) or a flag (--min-healthy-percent).
// What only the server can know (does the task definition exist, do two
// environments overlap) is left to it.

// environmentShape is an environment spec file: the JSON form of
// EnvironmentSpec, the body the operations take, so that the file and the
// request it becomes cannot drift apart.
var environmentShape = cli.StructShape(schedclient.EnvironmentSpec{}, "an environment spec")

// EnvironmentTypeDaemon is the only type of environment there is.
const EnvironmentTypeDaemon = "daemon"

// ParseEnvironmentSpec reads an environment spec file: one YAML or JSON
// document. name is how errors call the file. The spec's name may be
// absent (the command line can give it).
func ParseEnvironmentSpec(data []byte, name string) (*schedclient.EnvironmentSpec, error) {
	doc, err := cli.ReadSpecDocument(data, name, environmentShape, cli.SpecKind{What: "an environment spec", One: "environment"})
	if err != nil {
		return nil, err
	}
	var spec schedclient.EnvironmentSpec
	if err := doc.Decode(&spec); err != nil {
		return nil, err
	}
	if err := doc.Refuse(CheckEnvironmentSpec(&spec, specPath), nil); err != nil {
		return nil, err
	}
	return &spec, nil
}

// specPath names a field as the spec file does.
func specPath(field string) string { return field }

// flagName names a field as the flags of `trellis env create|update` do.
func flagName(field string) string {
	switch field {
	case "task_definition":
		return "--taskdef"
	case "instance_group.cluster":
		return "--cluster"
	}
	if strings.HasPrefix(field, "instance_group.attributes") {
		return "--attribute"
	}
	field = strings.TrimPrefix(field, "deployment.")
	return "--" + strings.ReplaceAll(field, "_", "-")
}

// CheckEnvironmentSpec checks what can be checked without the server:
// the type, the form of the task definition and of each filter, the
// percentage and the durations. label names a field (a spec path like
// "deployment.min_healthy_time") as the user wrote it.
func CheckEnvironmentSpec(s *schedclient.EnvironmentSpec, label func(field string) string) error {
	fail := func(field, format string, args ...any) error {
		return resource.NewFieldError(label(field), format, args...)
	}
	if s.Type != "" && s.Type != EnvironmentTypeDaemon {
		return fail("type", "%q is not a type of environment (the only one is %q)", s.Type, EnvironmentTypeDaemon)
	}
	if s.TaskDefinition != "" {
		if _, rev, err := orchestrator.ParseTaskDefinitionRef(s.TaskDefinition); err != nil {
			return fail("task_definition", "%v", err)
		} else if rev == 0 {
			return fail("task_definition", "%q names no revision: write family:revision, like %s:1", s.TaskDefinition, s.TaskDefinition)
		}
	}
	if g := s.InstanceGroup; g != nil {
		for i, f := range g.Attributes {
			if _, err := scheduler.ParseFilter(f); err != nil {
				return fail(fmt.Sprintf("instance_group.attributes[%d]", i), "%v", err)
			}
		}
	}
	if d := s.Deployment; d != nil {
		if p := d.MinHealthyPercent; p != nil && (*p < 0 || *p > 100) {
			return fail("deployment.min_healthy_percent", "%d is outside 0-100", *p)
		}
		for _, f := range []struct{ field, value string }{
			{"min_healthy_time", d.MinHealthyTime}, {"healthy_deadline", d.HealthyDeadline}, {"progress_deadline", d.ProgressDeadline},
		} {
			if f.value == "" {
				continue
			}
			if v, err := time.ParseDuration(f.value); err != nil {
				return fail("deployment."+f.field, "%q is not a duration: write it with a unit, like 10s or 5m", f.value)
			} else if v < 0 {
				return fail("deployment."+f.field, "%q is negative", f.value)
			}
		}
	}
	return nil
}

// EnvironmentFlags are the spec flags of `trellis env create|update`. A
// field left at its zero (nil, "") was not given.
type EnvironmentFlags struct {
	TaskDefinition    string
	Cluster           string
	Attributes        []string // nil: not given
	MinHealthyPercent *int32
	MinHealthyTime    string
	HealthyDeadline   string
	ProgressDeadline  string
	AutoRollback      *bool
}

// Given reports whether any flag was given.
func (f *EnvironmentFlags) Given() bool {
	return f.TaskDefinition != "" || f.Cluster != "" || f.Attributes != nil || f.MinHealthyPercent != nil ||
		f.MinHealthyTime != "" || f.HealthyDeadline != "" || f.ProgressDeadline != "" || f.AutoRollback != nil
}

// apply writes the given flags over s.
func (f *EnvironmentFlags) apply(s *schedclient.EnvironmentSpec) {
	if f.TaskDefinition != "" {
		s.TaskDefinition = f.TaskDefinition
	}
	if f.Cluster != "" || f.Attributes != nil {
		if s.InstanceGroup == nil {
			s.InstanceGroup = &schedclient.InstanceGroupSpec{}
		}
		if f.Cluster != "" {
			s.InstanceGroup.Cluster = f.Cluster
		}
		if f.Attributes != nil {
			s.InstanceGroup.Attributes = slices.Clone(f.Attributes)
		}
	}
	if f.MinHealthyPercent != nil || f.MinHealthyTime != "" || f.HealthyDeadline != "" || f.ProgressDeadline != "" || f.AutoRollback != nil {
		if s.Deployment == nil {
			s.Deployment = &schedclient.DeploymentSettings{}
		}
		d := s.Deployment
		if f.MinHealthyPercent != nil {
			d.MinHealthyPercent = f.MinHealthyPercent
		}
		if f.MinHealthyTime != "" {
			d.MinHealthyTime = f.MinHealthyTime
		}
		if f.HealthyDeadline != "" {
			d.HealthyDeadline = f.HealthyDeadline
		}
		if f.ProgressDeadline != "" {
			d.ProgressDeadline = f.ProgressDeadline
		}
		if f.AutoRollback != nil {
			d.AutoRollback = f.AutoRollback
		}
	}
}

// CreateSpec is the spec `trellis env create NAME --taskdef ...` sends.
func (f *EnvironmentFlags) CreateSpec(name string) (*schedclient.EnvironmentSpec, error) {
	if f.TaskDefinition == "" {
		return nil, errors.New("--taskdef: required: the task definition to run, FAMILY:REVISION")
	}
	s := &schedclient.EnvironmentSpec{Name: name, Type: EnvironmentTypeDaemon}
	f.apply(s)
	if err := CheckEnvironmentSpec(s, flagName); err != nil {
		return nil, err
	}
	return s, nil
}

// UpdateSpec is the spec `trellis env update NAME --flag...` sends: the
// environment's current spec with the given flags over it, whole, so that
// what was not given is kept whatever the server does with absent fields.
func (f *EnvironmentFlags) UpdateSpec(name string, current *pbscheduler.Environment) (*schedclient.EnvironmentSpec, error) {
	s := SpecOf(name, current)
	f.apply(s)
	if err := CheckEnvironmentSpec(s, flagName); err != nil {
		return nil, err
	}
	return s, nil
}

// SpecOf is an environment's spec as a spec file would say it.
func SpecOf(name string, e *pbscheduler.Environment) *schedclient.EnvironmentSpec {
	s := &schedclient.EnvironmentSpec{Name: name, Type: e.GetType(), TaskDefinition: e.GetTaskDefinition(), Role: e.GetRole()}
	if g := e.GetInstanceGroup(); g != nil {
		s.InstanceGroup = &schedclient.InstanceGroupSpec{Cluster: g.GetCluster(), Attributes: slices.Clone(g.GetAttributes())}
		if s.InstanceGroup.Attributes == nil {
			s.InstanceGroup.Attributes = []string{}
		}
	}
	if d := e.GetDeployment(); d != nil {
		s.Deployment = &schedclient.DeploymentSettings{
			MinHealthyTime:   d.GetMinHealthyTime(),
			HealthyDeadline:  d.GetHealthyDeadline(),
			ProgressDeadline: d.GetProgressDeadline(),
		}
		if d.MinHealthyPercent != nil {
			p := d.GetMinHealthyPercent()
			s.Deployment.MinHealthyPercent = &p
		}
		ar := d.GetAutoRollback()
		s.Deployment.AutoRollback = &ar
	}
	return s
}

// CheckSpecName reconciles the NAME argument with the spec file's name:
// either may be absent, but not both, and they may not differ.
func CheckSpecName(spec *schedclient.EnvironmentSpec, arg, file string) error {
	switch {
	case arg == "" && spec.Name == "":
		return fmt.Errorf("%s: name: required (or give it as NAME)", file)
	case arg != "" && spec.Name != "" && arg != spec.Name:
		return fmt.Errorf("%s: name: %q, but the command names %q", file, spec.Name, arg)
	case spec.Name == "":
		spec.Name = arg
	}
	return nil
}

// ParseVersionArg checks a --version value: a version's uuid or its
// number (from 1). "" means the default version.
func ParseVersionArg(v string) error {
	if v == "" {
		return nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 1 {
			return fmt.Errorf("--version: %d: versions are numbered from 1", n)
		}
		return nil
	}
	if !isUUID(v) {
		return fmt.Errorf("--version: %q is neither a version number (3) nor a version id (a uuid; trellis env versions lists them)", v)
	}
	return nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
	}
	return true
}
