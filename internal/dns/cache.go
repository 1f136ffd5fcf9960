package dns

import (
	"sync"

	miekg "github.com/miekg/dns"
)

// Revisioned is a Catalog that says when it changes: Revision differs
// after any change of what Answer reads. The server keeps the packed
// replies of a catalog's revision and answers a repeated question from
// them.
type Revisioned interface {
	Revision() uint64
}

// rotations is how many orders of a service's instances the server
// cycles through (Options.Rotate modulo it): divisible by every count up
// to 6, and 10, 12, 15, 20, 30, so that those spread evenly.
const rotations = 60

// maxCached bounds the cached replies; the cache empties when full.
const maxCached = 4096

// replyKey is everything of a query that Answer and the truncation read,
// but its id.
type replyKey struct {
	name           string // as asked: the reply echoes its case
	qtype, qclass  uint16
	rd, cd, edns   bool
	size, rotation int
}

// replyCache holds packed replies of one catalog revision, with id 0.
type replyCache struct {
	mu       sync.Mutex
	revision uint64
	replies  map[replyKey][]byte
}

// keyOf is the key of req's reply over a transport of size; false when
// such a query is not cached (another opcode, not one question).
func keyOf(req *miekg.Msg, size, rotation int) (replyKey, bool) {
	if req.Opcode != miekg.OpcodeQuery || len(req.Question) != 1 {
		return replyKey{}, false
	}
	q := req.Question[0]
	return replyKey{name: q.Name, qtype: q.Qtype, qclass: q.Qclass, rd: req.RecursionDesired, cd: req.CheckingDisabled,
		edns: req.IsEdns0() != nil, size: size, rotation: rotation}, true
}

// get appends to buf the reply of k at revision rev with id id; false
// when there is none.
func (c *replyCache) get(rev uint64, k replyKey, id uint16, buf []byte) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wire, ok := c.replies[k]
	if !ok || c.revision != rev {
		return nil, false
	}
	buf = append(buf[:0], wire...)
	buf[0], buf[1] = byte(id>>8), byte(id)
	return buf, true
}

// put keeps wire as the reply of k at revision rev.
func (c *replyCache) put(rev uint64, k replyKey, wire []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revision != rev || len(c.replies) >= maxCached {
		c.revision, c.replies = rev, make(map[replyKey][]byte)
	}
	kept := append([]byte(nil), wire...)
	kept[0], kept[1] = 0, 0
	c.replies[k] = kept
}
