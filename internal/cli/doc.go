// Package cli is what every command of the trellis command line shares:
// the one way a command that talks to a server is declared and run
// (ClientCommand, Env.Command), reading and checking spec files (resource
// documents here; a domain's own files, a task definition or an
// environment, through ReadSpecDocument), normalizing single-dash long
// flags, refusing mistakes, and rendering resources and events as tables,
// JSON or YAML. A domain's commands live beside its client code
// (internal/orchestrator/command, internal/scheduler/command) and build on
// this package; cmd/trellis only assembles the tree.
// Apart from Env (command.go), which reads the flags, the files and the
// streams and runs a command, everything here is a pure function over
// plain values (bytes in, bytes or values out), tested by tables.
//
// Design decisions:
//
//   - A spec file holds one or many documents, YAML or JSON, separated by
//     "---" lines; a document may also be a list of documents. Each document
//     is a wire.Document ({type, name, namespace, metadata, version, owner,
//     data}). The whole file is parsed and checked before anything is sent,
//     so a typo in the third document writes nothing.
//   - Spec files are read into a tree of nodes that keep their line
//     (go.yaml.in/yaml/v3's node API, or encoding/json's tokens for a JSON
//     file), by YAML 1.2 rules applied here rather than by the library's
//     conversion: on, y and no stay strings, as written. The tree is then
//     walked against a shape (built from the protobuf descriptor of the type
//     the file describes), so every refusal is a SpecError with the file,
//     the line, the field as the file spells it and a hint; protojson's own
//     errors name none of these, and only decode what the walk admitted.
//   - Where the CLI links the type registrations (server.Types), a document
//     also meets the checks the server makes before it reads its store
//     (resource.Registry.Check: names, labels, the type's Mutate and
//     Validate hooks), their field paths mapped back to lines. There is no
//     dry-run API, and this is what lets a bad last document write nothing
//     without --atomic. A type the CLI does not know is left to the server;
//     a CLI older than its server may refuse a field only the server knows.
//   - -o json and -o yaml print exactly what the HTTP API returned (YAML is
//     that JSON converted, keys sorted); the table is for people and may
//     change.
//   - The contract spells long flags with one dash (-addr, -data-dir), as
//     Consul and Nomad do. cobra/pflag read "-addr" as the shorthands
//     a,d,d,r, so arguments that name a known long flag with one dash are
//     rewritten to two dashes before parsing; "--addr" works as well, and
//     real shorthands (-o, -n, -f, -A) are left alone.
//   - A mistake fails before any request, with exit status 2: a flag with a
//     closed set of values is a Choice that refuses others as it is
//     parsed (a filter with a typo would otherwise look like an empty
//     answer); a blank positional argument is refused by the name its
//     usage line gives it (an empty name would address the collection);
//     a word that is not a subcommand is an unknown command with
//     suggestions. cmd/trellis applies these to the whole command tree at
//     once.
//   - Every client command is declared, not written out: its flags, what it
//     refuses before any request (Check), and a Run that returns what to
//     print (Result: a value for -o json and yaml, a table for people).
//     Env.Command does the rest the same way for all: parse, check, make
//     the client, run, print, and word a server that cannot be reached
//     (the client passes its transport errors through Unreachable, so the
//     wording holds whichever call failed and whatever wraps it).
//   - The build a binary reports is what Go recorded (vcs.revision,
//     vcs.time, vcs.modified), overridden by what -ldflags -X stamped;
//     the build date is the commit's, so builds stay reproducible.
package cli
