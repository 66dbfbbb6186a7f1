package sqlitetx

import (
	"context"
	"database/sql"
	"fmt"
)

// Write runs fn in a transaction on db and commits it. The connections are
// expected to begin IMMEDIATE transactions (those of allocator/sqlite's Open do), so
// the write lock is held from the first statement. An error from fn rolls
// the transaction back and is returned as is; an error from BEGIN means
// nothing was written. An error from COMMIT wraps ambiguous: SQLite may have
// made the transaction durable before the error reached us.
func Write(ctx context.Context, db *sql.DB, ambiguous error, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w: %w", ambiguous, err)
	}
	return nil
}
