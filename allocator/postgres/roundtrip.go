package postgres

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idmint/idmint/allocator"
)

// measureRoundTrips makes every connection of the pool report its
// exchanges to rt: the time from a write after which nothing was read yet
// to the first bytes read back, which is one request and its first reply
// (the startup and authentication exchanges of a connect, a ping, a
// begin, a statement). It is measured on the wire, so a connect that
// times out still leaves its round trips behind for the next one. An
// exchange also holds the server's time (a statement that runs long, one
// that waits for a row lock): rt keeps the least exchange of a window (see
// allocator.RoundTrip), which is the network's.
//
// When the pool bounds each connect (a multi-host URL, see
// followFailover), the bound follows the round trip too: each new
// connection gets rt.Timeout(that bound) instead of the fixed one.
func measureRoundTrips(cfg *pgxpool.Config, rt *allocator.RoundTrip) {
	dial := cfg.ConnConfig.DialFunc
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &timedConn{Conn: c, rt: rt}, nil
	}
	if floor := cfg.ConnConfig.ConnectTimeout; floor > 0 {
		rt.SetConnectFloor(floor)
		before := cfg.BeforeConnect
		cfg.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
			// cc is this connection's own copy of the config.
			cc.ConnectTimeout = rt.Timeout(floor)
			if before != nil {
				return before(ctx, cc)
			}
			return nil
		}
	}
}

// epoch makes timedConn's clock monotonic: durations since it.
var epoch = time.Now()

// timedConn times the round trips of one connection.
type timedConn struct {
	net.Conn
	rt *allocator.RoundTrip
	// sent is when the first write not yet answered began (nanoseconds
	// since epoch, 0: none). pgconn may read in the background while it
	// writes, hence atomic.
	sent atomic.Int64
}

func (c *timedConn) Write(b []byte) (int, error) {
	c.sent.CompareAndSwap(0, int64(time.Since(epoch)))
	return c.Conn.Write(b)
}

func (c *timedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		if s := c.sent.Swap(0); s != 0 {
			c.rt.Observe(time.Since(epoch) - time.Duration(s))
		}
	}
	return n, err
}
