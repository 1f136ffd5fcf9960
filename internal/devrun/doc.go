// Package devrun is what a `trellis dev` that keeps nothing (no
// -data-dir) holds on the host while it runs, and the sweep, at the next
// start of dev, of what such a run left when it died without cleaning up
// (SIGKILL, a crash, a power cut).
//
// A run is a directory under the temporary directory, trellis-dev-<random>:
// its id is the directory's name. It holds the agents' data dirs and
// run.lock, a file the dev process keeps locked (flock) for as long as it
// lives; the kernel drops the lock when the process ends, however it
// ends. Everything the run puts elsewhere on the host names the run:
//
//   - docker containers and network namespace holders carry the label
//     trellis.dev_run=<the run's directory>;
//   - exec tasks get a parent-death signal, so they die with dev; what
//     they started in the background is in their process groups, which the
//     run logs in exec-groups, and in cgroups under trellis/<id> where
//     cgroup v2 allows: the sweep kills both;
//   - bridge tasks' namespaces, veths, iptables rules and IP leases are
//     recorded by each agent's CNI state in its data dir, and the run
//     records each agent's network configuration in network.json, so that
//     a sweep can give the plugins their DEL.
//
// # Design decisions
//
//   - "Dead" is "its lock can be taken", never a pid: a pid is reused, a
//     lock dies with its process. The lock file is made under another name
//     and renamed once locked, so a sweep never takes the lock of a run
//     that is still starting.
//   - Only runs whose dev is gone are swept, and only what names them:
//     another dev running beside it, an agent with a data dir (whose tasks
//     are meant to outlive it, for adoption) and other clusters on the same
//     Docker engine are left alone.
//   - A run dir of an older dev (no run.lock) is left alone: nothing says
//     whether its dev still runs.
package devrun
