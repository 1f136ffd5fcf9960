package proxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// closeWriter is a connection that can end its sending half alone:
// *net.TCPConn (FIN) and *tls.Conn (close_notify).
type closeWriter interface {
	CloseWrite() error
}

// splice copies bytes both ways between a and b until both directions
// have ended, passing each end of stream on as a half close, and closes
// both. With idle > 0, it closes both once no byte has moved either way
// for idle. It returns the bytes copied a→b and b→a.
func splice(a, b net.Conn, idle time.Duration) (aToB, bToA int64) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	done := make(chan struct{})
	defer close(done)
	if idle > 0 {
		go func() {
			t := time.NewTimer(idle)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					since := time.Since(time.Unix(0, last.Load()))
					if since >= idle {
						closeBoth()
						return
					}
					t.Reset(idle - since)
				}
			}
		}()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		bToA = copyHalf(a, b, &last)
	}()
	aToB = copyHalf(b, a, &last)
	wg.Wait()
	closeBoth()
	return aToB, bToA
}

// copyHalf copies src to dst, noting the time of each read in last, then
// closes dst's sending half (or dst, when it cannot close half) so the
// peer sees the end of stream. A read error other than EOF closes src too,
// so the other direction ends.
func copyHalf(dst, src net.Conn, last *atomic.Int64) int64 {
	buf := make([]byte, 32*1024)
	var n int64
	for {
		nr, rerr := src.Read(buf)
		if nr > 0 {
			last.Store(time.Now().UnixNano())
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				src.Close()
				dst.Close()
				return n
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				src.Close()
				dst.Close()
				return n
			}
			if cw, ok := dst.(closeWriter); !ok || cw.CloseWrite() != nil {
				dst.Close()
			}
			return n
		}
	}
}
