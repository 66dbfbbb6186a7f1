package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed postgres/*.sql
var files embed.FS

// VersionTable is the table where goose records the applied versions.
const VersionTable = "idmint_schema_version"

// Postgres returns the PostgreSQL migration files.
func Postgres() fs.FS {
	sub, err := fs.Sub(files, "postgres")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

// Up applies every pending migration to a PostgreSQL database and returns
// the versions it applied.
func Up(ctx context.Context, db *sql.DB, logger *slog.Logger) ([]int64, error) {
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
		if logger != nil {
			logger.Info("migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
		}
	}
	return applied, nil
}

// Version returns the schema version of the database and the newest version
// this binary knows.
func Version(ctx context.Context, db *sql.DB) (current, latest int64, err error) {
	p, err := provider(db)
	if err != nil {
		return 0, 0, err
	}
	if current, err = p.GetDBVersion(ctx); err != nil {
		return 0, 0, fmt.Errorf("read schema version: %w", err)
	}
	sources := p.ListSources()
	if len(sources) > 0 {
		latest = sources[len(sources)-1].Version
	}
	return current, latest, nil
}

func provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, Postgres(),
		goose.WithTableName(VersionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}
