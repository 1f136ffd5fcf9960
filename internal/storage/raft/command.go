package raft

import (
	"strconv"

	pbresource "trellis.dev/trellis/api/resource/v1"
	pbstorage "trellis.dev/trellis/api/storage/v1"
)

// Constructors and checks of log commands. A command is checked before it
// goes into the log (so that nothing invalid is ever written) and again when
// it is applied (so that apply never trips over a nil field, whatever a
// peer sent); both checks are the same pure function, so apply stays
// deterministic.

func writeCommand(res *pbresource.Resource) *pbstorage.Command {
	return &pbstorage.Command{Op: &pbstorage.Command_Write{Write: &pbstorage.WriteOp{Resource: res}}}
}

// writeBatchCommand is a batch; without compares it encodes exactly as
// a batch did before compares existed.
func writeBatchCommand(resources []*pbresource.Resource, compares []*pbresource.Compare) *pbstorage.Command {
	return &pbstorage.Command{Op: &pbstorage.Command_WriteBatch{WriteBatch: &pbstorage.WriteBatchOp{Resources: resources, Compares: compares}}}
}

func deleteCommand(id *pbresource.ID, version string) *pbstorage.Command {
	return &pbstorage.Command{Op: &pbstorage.Command_Delete{Delete: &pbstorage.DeleteOp{Id: id, Version: version}}}
}

func registerCommand(s Server) *pbstorage.Command {
	return &pbstorage.Command{Op: &pbstorage.Command_RegisterServer{RegisterServer: &pbstorage.RegisterServerOp{
		Server: &pbstorage.Server{Id: s.ID, RaftAddr: s.RaftAddr, ServerAddr: s.ServerAddr},
	}}}
}

func deregisterCommand(id string) *pbstorage.Command {
	return &pbstorage.Command{Op: &pbstorage.Command_DeregisterServer{DeregisterServer: &pbstorage.DeregisterServerOp{Id: id}}}
}

// opName names a command for metrics and messages.
func opName(cmd *pbstorage.Command) string {
	switch cmd.GetOp().(type) {
	case *pbstorage.Command_Write:
		return "write"
	case *pbstorage.Command_WriteBatch:
		return "write_batch"
	case *pbstorage.Command_Delete:
		return "delete"
	case *pbstorage.Command_RegisterServer:
		return "register_server"
	case *pbstorage.Command_DeregisterServer:
		return "deregister_server"
	}
	return "unknown"
}

// isResourceCommand reports whether cmd changes resources: the only
// commands the forwarding service accepts from other servers.
func isResourceCommand(cmd *pbstorage.Command) bool {
	switch cmd.GetOp().(type) {
	case *pbstorage.Command_Write, *pbstorage.Command_WriteBatch, *pbstorage.Command_Delete:
		return true
	}
	return false
}

// checkCommand reports what makes cmd impossible to apply, naming the field.
func checkCommand(cmd *pbstorage.Command) error {
	switch op := cmd.GetOp().(type) {
	case *pbstorage.Command_Write:
		return checkResource("resource", op.Write.GetResource())
	case *pbstorage.Command_WriteBatch:
		for i, res := range op.WriteBatch.GetResources() {
			if res == nil || checkID("id", res.GetId()) != nil {
				// The member's name is built only for the refusal.
				return checkResource("resources["+strconv.Itoa(i)+"]", res)
			}
		}
		for i, c := range op.WriteBatch.GetCompares() {
			if err := checkCompare(i, c); err != nil {
				return err
			}
		}
		return nil
	case *pbstorage.Command_Delete:
		return checkID("id", op.Delete.GetId())
	case *pbstorage.Command_RegisterServer:
		s := op.RegisterServer.GetServer()
		if s.GetId() == "" || s.GetRaftAddr() == "" || s.GetServerAddr() == "" {
			return invalid("register_server: server id, raft_addr and server_addr are required")
		}
		return nil
	case *pbstorage.Command_DeregisterServer:
		if op.DeregisterServer.GetId() == "" {
			return invalid("deregister_server: id is required")
		}
		return nil
	case nil:
		return invalid("command has no operation")
	}
	return invalid("unknown command operation %T", cmd.GetOp())
}

func checkResource(field string, res *pbresource.Resource) error {
	if res == nil {
		return invalid("%s is missing", field)
	}
	return checkID(field+".id", res.GetId())
}

func checkID(field string, id *pbresource.ID) error {
	switch {
	case id == nil:
		return invalid("%s is missing", field)
	case id.GetType() == nil:
		return invalid("%s.type is missing", field)
	case id.GetType().GetGroup() == "" || id.GetType().GetGroupVersion() == "" || id.GetType().GetKind() == "":
		return invalid("%s.type needs a group, group_version and kind", field)
	case id.GetName() == "":
		return invalid("%s.name is empty", field)
	}
	return nil
}

// checkCompare reports what makes compare i of a batch impossible to
// check: a missing id or type, an unknown op, a name missing where one is
// needed, a version that is no store index where one is needed.
func checkCompare(i int, c *pbresource.Compare) error {
	id := c.GetId()
	switch {
	case id == nil:
		return invalid("compares[%d].id is missing", i)
	case id.GetType().GetGroup() == "" || id.GetType().GetGroupVersion() == "" || id.GetType().GetKind() == "":
		return invalid("compares[%d].id.type needs a group, group_version and kind", i)
	}
	switch c.GetOp() {
	case pbresource.Compare_OP_VERSION, pbresource.Compare_OP_ABSENT, pbresource.Compare_OP_EXISTS:
		if id.GetName() == "" {
			return invalid("compares[%d].id.name is empty", i)
		}
		return nil
	case pbresource.Compare_OP_NOTHING_NEWER:
		if v := c.GetVersion(); v != "" {
			if _, err := strconv.ParseUint(v, 10, 64); err != nil {
				return invalid("compares[%d].version %q is not a store version", i, v)
			}
		}
		return nil
	}
	return invalid("compares[%d].op %v is unknown", i, c.GetOp())
}
