package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idmint/idmint/allocator"

	_ "github.com/idmint/idmint/internal/redact/pgsecrets" // redacts connect errors
)

var _ allocator.Store = (*Store)(nil)

// Store is the production allocator.Store: one row per tag in idmint_tags
// holds the high-water mark, and idmint_segments logs every granted segment
// by request ID.
type Store struct {
	pool *pgxpool.Pool
	repl *replicator          // confirms grants on the standbys before they are served
	rtt  *allocator.RoundTrip // measured on the pool's connections; nil over a given pool
}

// Open connects to PostgreSQL. The pool's own settings come from the
// URL (pool_max_conns and friends).
func Open(ctx context.Context, url string) (*Store, error) {
	return open(ctx, url, allocator.NewRoundTrip(0, 0))
}

// open is Open with the estimator the pool's round trips feed.
func open(ctx context.Context, url string, rtt *allocator.RoundTrip) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "idmint"
	// A grant must be durable before its IDs are handed out: with
	// synchronous_commit off (a server, database or role default), a crash
	// could forget grants already served, and a restarted instance would
	// hand them out again.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	followFailover(cfg)
	measureRoundTrips(cfg, rtt)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return &Store{pool: pool, repl: newReplicator(DefaultReplication), rtt: rtt}, nil
}

// RoundTrip returns the store's measured round trip, for
// allocator.Config.RoundTrip (nil for a store made by New: its pool's
// connections are not measured).
func (p *Store) RoundTrip() *allocator.RoundTrip { return p.rtt }

// New returns a Store over an existing pool. Allocations pin
// synchronous_commit=on in their own transaction, so the pool's settings
// cannot make a grant less durable.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, repl: newReplicator(DefaultReplication)}
}

// Pool returns the connection pool.
func (p *Store) Pool() *pgxpool.Pool { return p.pool }

// Close closes the pool.
func (p *Store) Close() { p.pool.Close() }

// Ping implements allocator.Store.
func (p *Store) Ping(ctx context.Context) error {
	if err := p.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

// Prune deletes segment-log rows older than age. Lookups only ever need
// the last minutes; the log is kept longer for audits.
func (p *Store) Prune(ctx context.Context, age time.Duration) (int64, error) {
	tag, err := p.pool.Exec(ctx, `DELETE FROM idmint_segments WHERE granted_at < now() - $1::interval`, age)
	if err != nil {
		return 0, fmt.Errorf("prune segment log: %w", err)
	}
	return tag.RowsAffected(), nil
}
