package orchestrator

// MaxHeldEntries bounds each list of what an agent says it holds when it
// resumes its task stream (AgentService.WatchTasks, WatchTasksResume:
// tasks, definitions). An agent that holds more tasks takes a whole
// snapshot instead, and sends at most this many definitions; the servers
// refuse a longer list. An instance runs tens of tasks, not thousands:
// the bound only keeps one request from making a server build a large
// map.
const MaxHeldEntries = 10_000
