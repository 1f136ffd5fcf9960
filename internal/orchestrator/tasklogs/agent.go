package tasklogs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pbagent "trellis.dev/trellis/api/agent/v1"
	"trellis.dev/trellis/internal/resource"
)

// OpenFunc opens the output a request asks for on the agent. Its errors
// reach the reader: a gRPC status says which (NOT_FOUND: no such task or
// container here; FAILED_PRECONDITION: not started yet; ...).
type OpenFunc func(ctx context.Context, req *pbagent.LogRequest) (io.ReadCloser, error)

// Serve is the agent's side: it attaches to the server of cc as instance
// and answers each request with open, until ctx ends or the link breaks
// (it returns the error then: the caller attaches again). Reads under way
// end with it.
func Serve(ctx context.Context, cc grpc.ClientConnInterface, instance, session string, open OpenFunc, log *slog.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := pbagent.NewLogServiceClient(cc)
	// The agent names its instance and session: the servers take the link
	// for the instance's agent's only when the session is the one it
	// registered last (or the connection presents its agent leaf).
	stream, err := client.Attach(metadata.AppendToOutgoingContext(ctx,
		resource.AgentInstanceMetadataKey, instance, resource.AgentSessionMetadataKey, session))
	if err != nil {
		return err
	}
	if err := stream.Send(&pbagent.AttachRequest{Instance: instance, Session: session}); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := answer(ctx, client, req, open); err != nil && ctx.Err() == nil {
				log.Debug("a log read ended", "task", req.GetNamespace()+"/"+req.GetName(), "container", req.GetContainer(), "err", err)
			}
		}()
	}
}

// answer answers one request with a SendLogs call: the first chunk says
// whether the logs can be read, the next carry them. The server ending the
// call (its reader went away) ends the read.
func answer(ctx context.Context, client pbagent.LogServiceClient, req *pbagent.LogRequest, open OpenFunc) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	send, err := client.SendLogs(ctx)
	if err != nil {
		return err
	}
	var rc io.ReadCloser
	openErr := CheckRequest(req)
	if openErr == nil {
		rc, openErr = open(ctx, req)
	}
	if err := send.Send(firstChunk(req.GetId(), openErr)); err != nil || openErr != nil {
		if rc != nil {
			rc.Close()
		}
		_ = send.CloseSend()
		_, _ = send.CloseAndRecv()
		return errors.Join(err, openErr)
	}
	// The server ends the call when its reader has gone: then the read
	// ends here, though it may be blocked waiting for output (following).
	ended := make(chan error, 1)
	go func() {
		ended <- send.RecvMsg(new(pbagent.SendLogsResponse))
		cancel()
	}()
	go func() {
		<-ctx.Done()
		rc.Close()
	}()
	buf := make([]byte, ChunkSize)
	for {
		n, rerr := rc.Read(buf)
		if n > 0 {
			if err := send.Send(&pbagent.LogChunk{Data: append([]byte(nil), buf[:n]...)}); err != nil {
				return err // the server ended the call: its reader went
			}
		}
		if rerr == io.EOF {
			if err := send.CloseSend(); err != nil {
				return err
			}
			return ignoreDone(<-ended)
		}
		if rerr != nil {
			return rerr
		}
	}
}

// ignoreDone drops the server's "the reader has gone" at the end of a
// read the agent finished.
func ignoreDone(err error) error {
	if err == nil || status.Code(err) == codes.Canceled {
		return nil
	}
	return err
}
