package orchestratormodule

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pbresource "trellis.dev/trellis/api/resource/v1"
	"trellis.dev/trellis/internal/orchestrator"
	"trellis.dev/trellis/internal/resource"
)

// agentSessions is the module's module.Parts.AgentSessions: session
// proves the caller is the agent of instance when it is the session that
// agent registered last, as the stored Instance says. A read of this
// server's store that does not show it is confirmed on the leader, since
// an agent writes its reports right after it registers and this server
// may not have the registration yet.
func agentSessions(api resource.API) func(ctx context.Context, instance, session string) (bool, error) {
	return func(ctx context.Context, instance, session string) (bool, error) {
		for _, consistent := range []bool{false, true} {
			resp, err := api.Read(ctx, &pbresource.ReadRequest{Id: orchestrator.InstanceID(instance), Consistent: consistent})
			switch {
			case status.Code(err) == codes.NotFound:
				continue
			case err != nil:
				return false, err
			}
			in, err := orchestrator.DecodeInstance(resp.GetResource()) // the session registered, in status["agent"] or (old stores) the data
			if err != nil {
				return false, err
			}
			if orchestrator.SessionHolds(in, session) {
				return true, nil
			}
		}
		return false, nil
	}
}
