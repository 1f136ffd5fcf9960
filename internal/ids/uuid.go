// Package ids holds what Trellis knows about identifiers, apart from any
// store: the random uuids it hands out (Raft node ids, environment
// versions), and the pure helpers that compare and format resource ids and
// types. Domain packages and the agent use these without importing the
// storage layer.
package ids

import (
	"crypto/rand"
	"fmt"
)

// NewUUID returns a random (version 4) uuid in its lowercase text form.
func NewUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}
