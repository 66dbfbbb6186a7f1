package conformance_test

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// lossyProxy is a TCP proxy in front of one idmint instance that resets a
// share of replies after the server committed: when the first bytes of a
// reply come back from the server, it rolls the dice, and on a loss it
// resets both connections instead of passing them on. The request was
// served in full; the client never hears of it. It works on any protocol
// over TCP (plain HTTP/1.1 and TLS alike), one roll per reply.
type lossyProxy struct {
	ln     net.Listener
	target string
	// share is the fraction of replies lost, in millionths.
	share atomic.Int64
	// replies and resets count the replies seen and those lost.
	replies, resets atomic.Int64

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newLossyProxy starts a proxy to target on a free 127.0.0.1 port, stopped
// when tb ends.
func newLossyProxy(tb testing.TB, target string, share float64) *lossyProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &lossyProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.setShare(share)
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.close)
	return p
}

func (p *lossyProxy) addr() string { return p.ln.Addr().String() }

func (p *lossyProxy) setShare(share float64) { p.share.Store(int64(share * 1e6)) }

func (p *lossyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

func (p *lossyProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

// serve pumps one connection. A dead target (a killed instance) resets the
// client's connection at once, as the network would.
func (p *lossyProxy) serve(down net.Conn) {
	p.track(down, true)
	defer p.track(down, false)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		reset(down)
		return
	}
	p.track(up, true)
	defer p.track(up, false)
	// asked is set when request bytes went up since the last reply began:
	// the next bytes from the server begin a reply.
	var asked atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := down.Read(buf)
			if n > 0 {
				asked.Store(true)
				if _, werr := up.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		up.(*net.TCPConn).CloseWrite()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if asked.Swap(false) {
				p.replies.Add(1)
				if rand.Int64N(1e6) < p.share.Load() {
					p.resets.Add(1)
					reset(down)
					reset(up)
					<-done
					return
				}
			}
			if _, werr := down.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				reset(down)
			}
			break
		}
	}
	down.Close()
	up.Close()
	<-done
}

// reset closes c with a TCP RST (SO_LINGER 0).
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

func (p *lossyProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
