// Package sqlitetx runs idmint's SQLite write transactions, one way for every
// store that writes the file (the allocator's and the lease store's):
//
//	err := sqlitetx.Write(ctx, db, allocator.ErrAmbiguous, func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, `UPDATE …`)
//		return err
//	})
//
// A failed COMMIT wraps the caller's ambiguous sentinel: the transaction may
// be on disk, so the caller must treat what it wrote as done (a gap, never a
// duplicate).
package sqlitetx
