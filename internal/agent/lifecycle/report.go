package lifecycle

import "sync"

// reporter hands snapshots to the Report callback from a goroutine of its
// own, keeping only the newest one that waits, so that the task's loop
// never waits for the callback.
type reporter struct {
	fn      func(State)
	mu      sync.Mutex
	pending *State
	kick    chan struct{}
	quit    chan struct{}
	done    chan struct{}
}

func newReporter(fn func(State)) *reporter {
	p := &reporter{fn: fn, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

func (p *reporter) publish(s State) {
	if p.fn == nil {
		return
	}
	p.mu.Lock()
	p.pending = &s
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *reporter) loop() {
	defer close(p.done)
	for {
		select {
		case <-p.kick:
			p.deliver()
		case <-p.quit:
			p.deliver()
			return
		}
	}
}

func (p *reporter) deliver() {
	p.mu.Lock()
	s := p.pending
	p.pending = nil
	p.mu.Unlock()
	if s != nil {
		p.fn(*s)
	}
}

// close delivers what is pending and waits for the callback to return.
func (p *reporter) close() {
	close(p.quit)
	<-p.done
}
