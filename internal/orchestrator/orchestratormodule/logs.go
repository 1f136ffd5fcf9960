package orchestratormodule

import (
	"context"
	"io"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	pborch "trellis.dev/trellis/api/orchestrator/v1"
	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/acl"
	"trellis.dev/trellis/internal/httpapi"
	"trellis.dev/trellis/internal/module"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/orchestrator/tasklogs"
	"trellis.dev/trellis/internal/resource"
)

// Task logs through the servers (package tasklogs): the agents' links on
// the public port, the forwarded reads on the server-to-server port, and
// the HTTP route people read them at.

// logPermissions: agents attach and answer; only servers forward reads.
var (
	logPermissions       = map[string]acl.Permission{"Attach": acl.Agent, "SendLogs": acl.Agent}
	serverLogPermissions = map[string]acl.Permission{"ReadLogs": acl.Server}
)

// logParts are the services and the route of task logs.
func logParts(d module.Deps) (public, server module.Service, route httpapi.Route) {
	hub := tasklogs.NewHub()
	reader := &tasklogs.Reader{Hub: hub, Self: d.Cluster.ServerAddr, Servers: d.Cluster.ServerAddrs}
	if d.Cluster.ServerConn != nil {
		reader.Conn = func(addr string) (grpc.ClientConnInterface, error) { return d.Cluster.ServerConn(addr) }
	}
	public = module.Service{Desc: &pbagent.LogService_ServiceDesc, Impl: logService{hub: hub}, Permissions: logPermissions}
	server = module.Service{Desc: &pbagent.ServerLogService_ServiceDesc, Impl: serverLogService{hub: hub}, Permissions: serverLogPermissions}
	route = httpapi.Route{Pattern: "GET /v1/tasks/{name}/logs/{container}", Permission: acl.NamespaceRead, Handler: logsRoute{api: d.API, reader: reader}.serve}
	return public, server, route
}

type logService struct {
	pbagent.UnimplementedLogServiceServer
	hub *tasklogs.Hub
}

func (s logService) Attach(stream pbagent.LogService_AttachServer) error { return s.hub.Attach(stream) }
func (s logService) SendLogs(stream pbagent.LogService_SendLogsServer) error {
	return s.hub.SendLogs(stream)
}

type serverLogService struct {
	pbagent.UnimplementedServerLogServiceServer
	hub *tasklogs.Hub
}

func (s serverLogService) ReadLogs(req *pbagent.LogRequest, stream pbagent.ServerLogService_ReadLogsServer) error {
	return s.hub.ReadLogs(req, stream)
}

// logsRoute serves GET /v1/tasks/{name}/logs/{container}?namespace=&stream=&follow=.
type logsRoute struct {
	api    resource.API
	reader *tasklogs.Reader
}

func (l logsRoute) serve(w http.ResponseWriter, r *http.Request) error {
	p, err := httpapi.Params(r, "namespace", "stream", "follow")
	if err != nil {
		return err
	}
	req, err := logRequest(p, r.PathValue("name"), r.PathValue("container"))
	if err != nil {
		return err
	}
	res, err := l.api.Read(r.Context(), &pbresource.ReadRequest{Id: orchestrator.TaskID(req.Namespace, req.Name)})
	if err != nil {
		return err
	}
	task, err := resource.DecodeData[*pborch.Task](res.GetResource())
	if err != nil {
		return err
	}
	if task.GetInstance() == "" {
		return status.Errorf(codes.FailedPrecondition, "task %s/%s is placed on no instance yet: it has no logs", req.Namespace, req.Name)
	}
	req.Instance, req.Uid = task.GetInstance(), res.GetResource().GetId().GetUid()
	// The read ends with the request, or when the server begins to stop.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(httpapi.Stopping(r.Context()), cancel)
	defer stop()
	chunks, err := l.reader.Open(ctx, req)
	if err != nil {
		return err
	}
	defer chunks.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	for {
		data, err := chunks.Next()
		if len(data) > 0 {
			if _, werr := w.Write(data); werr != nil {
				return nil // the reader went away
			}
			_ = rc.Flush()
		}
		if err == io.EOF || err != nil {
			// After the status line an error can only cut the output
			// short; the client sees the body end.
			return nil
		}
	}
}

// logRequest checks the route's parameters: a task name, a container, a
// stream of stdout or stderr, follow 1 or 0.
func logRequest(p map[string]string, name, container string) (*pbagent.LogRequest, error) {
	req := &pbagent.LogRequest{Namespace: p["namespace"], Name: name, Container: container, Stream: p["stream"]}
	if req.Namespace == "" {
		req.Namespace = "default"
	}
	if err := resource.ValidateName("name", name); err != nil {
		return nil, httpapi.InputError("name", "%v", err)
	}
	if container == "" {
		return nil, httpapi.InputError("container", "required")
	}
	switch req.Stream {
	case "":
		req.Stream = tasklogs.Stdout
	case tasklogs.Stdout, tasklogs.Stderr:
	default:
		return nil, httpapi.InputError("stream", "%q is not stdout or stderr", req.Stream)
	}
	switch p["follow"] {
	case "", "0", "false":
	case "1", "true":
		req.Follow = true
	default:
		return nil, httpapi.InputError("follow", "%q: give 1 or 0", p["follow"])
	}
	return req, nil
}
