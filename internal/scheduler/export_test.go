package scheduler

// SetAfterCheck makes o run f between an operation's checks and its write,
// where a concurrent operation would slip in.
func SetAfterCheck(o *Operations, f func()) { o.afterCheck = f }
