// Package tasklogs carries a task's logs from the agent of its instance
// to whoever reads them through the servers (`trellis task logs`, GET
// /v1/tasks/{name}/logs/{container}), as Nomad's `alloc logs` asks the
// client over its connection: the servers check the read as every other
// read, and the reader needs no way to the instance.
//
// The protocol (api/agent/v1/logs.proto):
//
//  1. Once connected to a server, the agent opens LogService.Attach on it
//     and names its instance. The server's Hub records the link: this
//     server holds that instance's agent.
//  2. A read arrives at any server (Reader.Open). Route decides where it
//     goes: to this server's Hub when it holds the link, else to each
//     other server in turn over the server-to-server port
//     (ServerLogService.ReadLogs), until one holds it; a server asked
//     that way only looks at its own Hub, so a read crosses at most one
//     hop.
//  3. The Hub gives the request an id and sends it down the link. The
//     agent answers with a call of its own, LogService.SendLogs: a first
//     chunk naming the request and saying whether the logs can be read,
//     then the output. One call per read, so each read has gRPC's flow
//     control to itself: a slow reader slows its own output only.
//  4. The reader going away (Ctrl-C on `-f`, a closed HTTP request) ends
//     the read on the server, which ends the SendLogs call; the agent's
//     send fails and it closes the log file.
//
// The pure pieces are Route and TryNext (where a read goes),
// CheckRequest and firstChunk/openError (what a valid exchange is); the
// Hub, the agent's Serve and the Reader are the I/O around them.
package tasklogs
