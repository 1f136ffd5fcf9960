package command

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	pbcatalog "trellis.dev/trellis/api/catalog/v1"
	"trellis.dev/trellis/internal/catalog"
	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/client"
	"trellis.dev/trellis/internal/httpapi/wire"
	"trellis.dev/trellis/internal/resource"
)

func newRegisterCmd(c cli.CommandEnv) *cobra.Command {
	var file string
	var docs []cli.Document
	return c.Env.Command(cli.ClientCommand{
		Use:   "register -f FILE",
		Short: "Register services that run outside Trellis, with TTL checks",
		Long: `Register the service instances of FILE ("-" reads standard input): a service
that runs outside Trellis, such as a database on a VM. FILE holds
catalog/v1/ServiceInstance documents (and, if you like, their
catalog/v1/Service), as 'trellis resource apply' reads them; an instance names
neither a task nor an instance, and each of its checks is a TTL check (a ttl
of 1s to 24h). They are written all together or not at all; a service no
document defines is created with the defaults (protocol tcp) when missing.

Each check is critical until someone refreshes it ('trellis service check'),
and again whenever a ttl passes without a refresh.`,
		Example: `  cat > db.yaml <<'YAML'
  type: catalog/v1/ServiceInstance
  name: db-1
  data:
    service: db
    address: 10.0.0.9
    port: 5432
    tags: [primary]
    checks:
      - {name: alive, ttl: 30s}
  YAML
  trellis service register -f db.yaml
  trellis service check pass db-1 alive`,
		Args: cobra.NoArgs,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVarP(&file, "file", "f", "", `the file of the instances to register ("-": standard input)`)
		},
		Check: func(call *cli.Call) error {
			if file == "" {
				return cli.Usage(fmt.Errorf("-f: give the file of the instances to register"))
			}
			data, name, err := call.ReadInput(file)
			if err != nil {
				return err
			}
			if docs, err = cli.ParseDocuments(data, name, c.Types); err != nil {
				return err
			}
			return checkRegistration(docs)
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			written, err := register(ctx, call.Client, docs)
			if err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Table: func(w io.Writer) error {
				for _, line := range written {
					if _, err := fmt.Fprintln(w, line); err != nil {
						return err
					}
				}
				return nil
			}}, nil
		},
	})
}

// checkRegistration refuses, naming the document, what register does not
// take: another type than the catalog's, and an instance of a task (its
// agent registers it).
func checkRegistration(docs []cli.Document) error {
	for _, d := range docs {
		switch d.Type {
		case resourceType(serviceWire):
		case resourceType(instanceWire):
			var si pbcatalog.ServiceInstance
			if err := cli.DecodeData(&wire.Resource{Data: d.Data}, &si); err != nil {
				return fmt.Errorf("%s: %w", d.Source, err)
			}
			if si.GetTask() != "" || si.GetInstance() != "" {
				return fmt.Errorf("%s: data.task: an instance of a task is registered by the agent that runs it; register here only what runs outside Trellis (no task, no instance)", d.Source)
			}
		default:
			return fmt.Errorf("%s: type: %s is not the catalog's: give catalog/v1/ServiceInstance or catalog/v1/Service documents ('trellis resource apply' writes any type)", d.Source, d.Type)
		}
	}
	return nil
}

func resourceType(t wire.Type) string { return t.Group + "/" + t.GroupVersion + "/" + t.Kind }

// register writes docs in one batch, then creates each service an
// instance names that has no Service yet, and says what it did.
func register(ctx context.Context, c *client.Client, docs []cli.Document) ([]string, error) {
	batch := make([]wire.Document, len(docs))
	defined := map[string]bool{}
	for i, d := range docs {
		batch[i] = d.Document
		if d.Type == resourceType(serviceWire) {
			defined[namespaceOr(d.Namespace)+"/"+d.Name] = true
		}
	}
	if _, err := c.WriteBatch(ctx, batch); err != nil {
		return nil, err
	}
	var lines []string
	for _, d := range docs {
		if d.Type == resourceType(serviceWire) {
			lines = append(lines, fmt.Sprintf("Service %s/%s written.", namespaceOr(d.Namespace), d.Name))
			continue
		}
		var si pbcatalog.ServiceInstance
		_ = cli.DecodeData(&wire.Resource{Data: d.Data}, &si)
		ns := namespaceOr(d.Namespace)
		lines = append(lines, fmt.Sprintf("Instance %s/%s of service %s registered at %s:%d; its checks are critical until refreshed (trellis service check pass %s CHECK).", ns, d.Name, si.GetService(), si.GetAddress(), si.GetPort(), d.Name))
		key := ns + "/" + si.GetService()
		if defined[key] {
			continue
		}
		defined[key] = true
		_, err := c.Apply(ctx, wire.Document{Type: resourceType(serviceWire), Namespace: d.Namespace, Name: si.GetService(), Version: resource.CreateOnly, Data: []byte("{}")})
		switch {
		case err == nil:
			lines = append(lines, fmt.Sprintf("Service %s created (protocol tcp).", key))
		case client.IsCode(err, wire.CodeConflict):
		default:
			return lines, fmt.Errorf("the instances are registered, but creating service %s failed: %w", key, err)
		}
	}
	return lines, nil
}

func newDeregisterCmd(e *cli.Env) *cobra.Command {
	return e.Command(cli.ClientCommand{
		Use:   "deregister NAME",
		Short: "Remove an instance registered from outside Trellis",
		Long: `Remove the service instance NAME of the namespace (-n, "default" by default)
that 'trellis service register' registered. An instance of a task is not
removed here: it leaves the catalog with its task. The service itself stays
(trellis resource delete catalog/v1/Service NAME removes it).`,
		Example: `  trellis service deregister db-1
  trellis service deregister db-2 -n payments`,
		Args:       cobra.ExactArgs(1),
		Namespaced: true,
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ns, name := namespaceOr(call.Namespace), call.Args[0]
			r, err := call.Client.Read(ctx, client.Ref{Type: instanceWire, Namespace: ns, Name: name}, true)
			if err != nil {
				return cli.Result{}, err
			}
			var si pbcatalog.ServiceInstance
			if err := cli.DecodeData(r, &si); err != nil {
				return cli.Result{}, err
			}
			if si.GetTask() != "" {
				return cli.Result{}, fmt.Errorf("%s/%s is an instance of task %s on %s: it leaves the catalog with its task (trellis task stop %s)", ns, name, si.GetTask(), si.GetInstance(), si.GetTask())
			}
			if err := call.Client.Delete(ctx, client.Ref{Type: instanceWire, Namespace: ns, Name: name}, r.Version); err != nil {
				return cli.Result{}, err
			}
			return cli.Say("Instance %s/%s of service %s deregistered.", ns, name, si.GetService()), nil
		},
	})
}

// checkVerbs maps the verbs of `service check` onto a check's status.
var checkVerbs = map[string]string{"pass": catalog.CheckPassing, "warn": catalog.CheckWarning, "fail": catalog.CheckCritical}

func newCheckCmd(e *cli.Env) *cobra.Command {
	var note string
	return e.Command(cli.ClientCommand{
		Use:   "check pass|warn|fail INSTANCE CHECK",
		Short: "Refresh a TTL check of an instance registered from outside Trellis",
		Long: `Set the TTL check CHECK of the service instance INSTANCE (in -n, "default" by
default) to passing (pass), warning (warn) or critical (fail), with --note as
its output. The check keeps that status until its ttl passes without another
refresh; then the servers turn it critical. Refresh it well within its ttl.

Only instances registered from outside Trellis have TTL checks: the checks of
an instance of a task follow its task's health, as its agent reports it, and
are refused here. It needs namespace:write.`,
		Example: `  trellis service check pass db-1 alive
  trellis service check warn db-1 alive --note "replication lag 3s"
  while sleep 10; do trellis service check pass db-1 alive; done`,
		Args: cobra.ExactArgs(3),
		Check: func(call *cli.Call) error {
			if _, ok := checkVerbs[call.Args[0]]; !ok {
				return cli.Usage(fmt.Errorf("pass|warn|fail: %q is none of them: give pass, warn or fail", call.Args[0]))
			}
			return nil
		},
		Namespaced: true, Output: true,
		Flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&note, "note", "", "the check's output (what a reader sees beside its status)")
		},
		Run: func(ctx context.Context, call *cli.Call) (cli.Result, error) {
			ns, inst, check := namespaceOr(call.Namespace), call.Args[1], call.Args[2]
			st := checkVerbs[call.Args[0]]
			path := catalog.ChecksPath + "/" + url.PathEscape(inst) + "/checks/" + url.PathEscape(check)
			var health pbcatalogHealth
			if err := call.Client.Do(ctx, http.MethodPut, call.Client.URL(path, url.Values{"namespace": {ns}}), catalog.CheckRefresh{Status: st, Note: note}, &health); err != nil {
				return cli.Result{}, err
			}
			return cli.Result{Value: health, Table: func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "Check %s of %s/%s is %s; the instance is %s.\n", check, ns, inst, st, strings.ToLower(health.Health))
				return err
			}}, nil
		},
	})
}

// pbcatalogHealth is the answer of a refresh: the instance's health as
// readers see it (catalog.ChecksStatus in its JSON form).
type pbcatalogHealth struct {
	Checks []struct {
		Name      string `json:"name"`
		Status    string `json:"status"`
		Output    string `json:"output"`
		ChangedAt string `json:"changed_at"`
		CheckedAt string `json:"checked_at"`
	} `json:"checks"`
	Health     string `json:"health"`
	ReportedAt string `json:"reported_at"`
}
