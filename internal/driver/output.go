package driver

import "sync"

// ExecOutputLimit bounds the output Driver.Exec returns: enough for a
// health check's message, bounded so that a runaway command cannot grow
// the agent.
const ExecOutputLimit = 64 << 10

// OutputBuffer keeps the first Limit bytes written to it and drops the
// rest, while telling the writer all went well, so that a chatty command
// is neither stalled nor allowed to grow the agent. Drivers collect Exec
// output in it.
type OutputBuffer struct {
	Limit int

	mu  sync.Mutex
	buf []byte
}

func (b *OutputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.Limit - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Bytes is a copy of what was kept.
func (b *OutputBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}
