package core

import (
	"context"

	"github.com/idmint/idmint/snowflake"
	"github.com/idmint/idmint/wire"
)

// NextSnowflake returns a Snowflake ID: behind the access control of the
// ID operations (a token with any ID scope in the token mode), one ID
// charged.
func (c *Core) NextSnowflake(ctx context.Context, who Caller) (int64, error) {
	if !c.fast {
		if _, err := c.admitIDs(ctx, who, "", 1); err != nil {
			return 0, err
		}
	}
	return c.cfg.Snowflake.Next(ctx)
}

// NextSnowflakes returns count Snowflake IDs, charged by count. Bad is the
// adapter's decoding error (see IDsRequest).
func (c *Core) NextSnowflakes(ctx context.Context, who Caller, count int, bad error) ([]int64, error) {
	if !c.fast {
		if _, err := c.admitIDs(ctx, who, "", c.asked(count)); err != nil {
			return nil, err
		}
	}
	if bad != nil {
		return nil, bad
	}
	if count < 1 || count > c.cfg.MaxCount {
		return nil, c.CountError()
	}
	return c.cfg.Snowflake.NextN(ctx, count)
}

// ErrSnowflakeID is the error of a parse without exactly one id.
var ErrSnowflakeID = NewError(wire.CodeInvalidID, "id is required once, e.g. /snowflake/parse?id=123456789")

// ParseSnowflake decodes the decimal ID id in the node's layout. It is
// open: it hands out nothing.
func (c *Core) ParseSnowflake(_ context.Context, _ Caller, id string) (wire.ParsedSnowflake, error) {
	return ParseSnowflake(c.cfg.Snowflake.Layout(), id)
}

// ParseSnowflake decodes the decimal ID s in layout l.
func ParseSnowflake(l snowflake.Layout, s string) (wire.ParsedSnowflake, error) {
	p, err := l.ParseString(s)
	if err != nil {
		return wire.ParsedSnowflake{}, err
	}
	return wire.ParsedSnowflake{ID: p.ID, Time: p.Time, UnixMS: p.UnixMilli, WorkerID: p.Worker, Sequence: p.Sequence,
		Layout: l.Bits(), Epoch: l.Epoch.UTC()}, nil
}

// SnowflakeOn reports whether the Snowflake operations are served.
func (c *Core) SnowflakeOn() bool { return c.cfg.Snowflake != nil }
