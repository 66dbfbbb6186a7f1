package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/idmint/idmint/allocator/postgres"
	"github.com/idmint/idmint/allocator/sqlite"
	"github.com/idmint/idmint/httpapi"
	"github.com/idmint/idmint/internal/tracing"
	"github.com/idmint/idmint/lease"
	"github.com/idmint/idmint/snowflake"
)

// snowflakeConfig holds the Snowflake flags.
type snowflakeConfig struct {
	enabled    bool
	bits       string
	epoch      string
	ttl        time.Duration
	renewEvery time.Duration
	margin     time.Duration
	maxWait    time.Duration
}

// registerLayout adds the flags that choose the layout.
func (c *snowflakeConfig) registerLayout(fs *flag.FlagSet) {
	fs.StringVar(&c.bits, "snowflake-bits", snowflake.DefaultLayout().Bits(), "snowflake layout: TIME/WORKER/SEQUENCE bits, summing to 63")
	fs.StringVar(&c.epoch, "snowflake-epoch", snowflake.DefaultEpoch.Format(time.RFC3339), "snowflake epoch: the time of millisecond 0 (RFC 3339)")
}

// register adds every Snowflake flag of serve.
func (c *snowflakeConfig) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "snowflake", true, "serve /snowflake: time-ordered ids with a worker id leased from the database")
	c.registerLayout(fs)
	fs.DurationVar(&c.ttl, "snowflake-lease-ttl", time.Minute, "how long a worker id lease lasts unrenewed: snowflake ids ride through a database outage of ttl - margin - renew interval; to cover a runway, ttl >= runway + margin + renew interval")
	fs.DurationVar(&c.renewEvery, "snowflake-renew-every", 0, "how often the lease is renewed (default ttl/6)")
	fs.DurationVar(&c.margin, "snowflake-margin", time.Second, "safety margin between lease windows, and the largest clock difference with the database tolerated")
	fs.DurationVar(&c.maxWait, "snowflake-max-wait", 0, "longest a request waits for a clock that went backwards (default the margin)")
}

// layout returns the layout the flags describe, validated.
func (c *snowflakeConfig) layout() (snowflake.Layout, error) {
	epoch, err := time.Parse(time.RFC3339Nano, c.epoch)
	if err != nil {
		return snowflake.Layout{}, fmt.Errorf("--snowflake-epoch %q: want an RFC 3339 time such as 2025-01-01T00:00:00Z", c.epoch)
	}
	l := snowflake.Layout{Epoch: epoch.UTC()}
	if err := l.ParseBits(c.bits); err != nil {
		return snowflake.Layout{}, fmt.Errorf("--snowflake-bits/--snowflake-epoch: %w", err)
	}
	return l, nil
}

// startSnowflake leases a worker ID from the store (or keeps trying in the
// background) and returns the node; nil when the mode is off. With tr
// (nil: off) each lease call is a span.
func startSnowflake(ctx context.Context, c snowflakeConfig, store *openedStore, holder string, tr *tracing.Tracing, logger *slog.Logger) (*snowflake.Node, error) {
	if !c.enabled {
		return nil, nil
	}
	layout, err := c.layout()
	if err != nil {
		return nil, err
	}
	var leases snowflake.LeaseStore
	switch s := store.store.(type) {
	case *postgres.Store:
		leases = lease.NewPostgres(s.Pool())
	case *sqlite.Store:
		leases = lease.NewSQLite(s.DB())
	default:
		return nil, fmt.Errorf("snowflake: no worker-id leases in a %T", store.store)
	}
	if tr != nil {
		leases = tr.Leases(leases)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return snowflake.Start(ctx, snowflake.Config{
		Layout: layout, Store: leases, Holder: holder,
		TTL: c.ttl, RenewEvery: c.renewEvery, Margin: c.margin, MaxWait: c.maxWait,
		Logger: logger,
	})
}

// snowflakeParseFlags is `idmint snowflake parse ID`.
func snowflakeParseFlags(fs *flag.FlagSet) runFunc {
	var c snowflakeConfig
	c.registerLayout(fs)
	return func(_ context.Context, out output, args []string) error {
		layout, err := c.layout()
		if err != nil {
			return err
		}
		p, err := httpapi.ParseSnowflake(layout, args[0])
		if err != nil {
			return err
		}
		enc := json.NewEncoder(out.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	}
}

// snowflakeAPI is node for httpapi.Config: a nil node is no Snowflake.
func snowflakeAPI(node *snowflake.Node) httpapi.Snowflake {
	if node == nil {
		return nil
	}
	return node
}
