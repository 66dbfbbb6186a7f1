package migrations

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/pressly/goose/v3/lock"
)

var _ lock.Locker = (*sqliteLocker)(nil)

// Timing of the SQLite migration lock.
const (
	// lockLease is how long a lock outlives its holder's last renewal: the
	// longest a process killed mid-migration keeps the others waiting.
	lockLease = 15 * time.Second
	// lockRenew is how often the holder renews its lease.
	lockRenew = lockLease / 3
	// lockPoll is how often a waiting process tries again.
	lockPoll = 50 * time.Millisecond
	// lockWait bounds the wait for the lock.
	lockWait = 2 * time.Minute
)

// sqliteLocker serialises migrations of one SQLite file across processes.
//
// goose v3.30 ships lockers for PostgreSQL (advisory and table locks) and
// MySQL only. SQLite's own write lock cannot serve: goose runs each migration
// in its own transaction, so nothing can hold the write lock across them. The
// lock is therefore a lease row in the file itself, renewed while held and
// taken over once it expires, so a holder that dies frees it within
// lockLease. A process that waits for it then finds the migrations applied.
type sqliteLocker struct {
	owner string
	stop  context.CancelFunc // ends the renewal; set by Lock, used by Unlock
	done  chan struct{}      // closed when the renewal has ended
}

func newSQLiteLocker() *sqliteLocker { return &sqliteLocker{owner: uuid.NewString()} }

// Lock implements lock.Locker.
func (l *sqliteLocker) Lock(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `
CREATE TABLE IF NOT EXISTS idmint_migration_lock (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL -- Unix milliseconds
)`); err != nil {
		return fmt.Errorf("create migration lock table: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	for {
		now := time.Now()
		res, err := db.ExecContext(ctx, `
INSERT INTO idmint_migration_lock (id, owner, expires_at) VALUES (1, ?, ?)
ON CONFLICT (id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
WHERE idmint_migration_lock.expires_at < ?`, l.owner, now.Add(lockLease).UnixMilli(), now.UnixMilli())
		if err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for the migration lock held by another process: %w", ctx.Err())
		case <-time.After(lockPoll):
		}
	}
	renewCtx, stop := context.WithCancel(context.Background())
	l.stop, l.done = stop, make(chan struct{})
	go l.renew(renewCtx, db)
	return nil
}

// renew extends the lease until ctx ends. A failed renewal is retried at the
// next tick: the lease outlasts two missed ones.
func (l *sqliteLocker) renew(ctx context.Context, db *sql.DB) {
	defer close(l.done)
	t := time.NewTicker(lockRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			db.ExecContext(ctx, `UPDATE idmint_migration_lock SET expires_at = ? WHERE owner = ?`,
				time.Now().Add(lockLease).UnixMilli(), l.owner)
		}
	}
}

// Unlock implements lock.Locker.
func (l *sqliteLocker) Unlock(ctx context.Context, db *sql.DB) error {
	if l.stop != nil {
		l.stop()
		<-l.done
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM idmint_migration_lock WHERE owner = ?`, l.owner); err != nil {
		return fmt.Errorf("release migration lock: %w", err)
	}
	return nil
}
