// Package schedulertest is the daemon scheduler's test harness: the real
// resource service on the in-memory backend, the scheduler's controller
// run by hand on a fake clock, its operations, and the test playing the
// agents. The controller's tests and the operations' tests share it.
package schedulertest
