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

// The schema is written once per dialect: the files share version numbers
// and differ only where SQL must (PostgreSQL checks tag names with a regular
// expression, SQLite with GLOB).
//
//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// VersionTable is the table where goose records the applied versions.
const VersionTable = "idmint_schema_version"

// Dialect is a database engine the schema is written for.
type Dialect string

// The dialects idmint knows.
const (
	PostgreSQL Dialect = "postgres"
	SQLite     Dialect = "sqlite"
)

// Files returns the migration files of d.
func Files(d Dialect) (fs.FS, error) {
	switch d {
	case PostgreSQL, SQLite:
		return fs.Sub(files, string(d))
	}
	return nil, fmt.Errorf("migrations: unknown dialect %q", d)
}

// Up applies every pending migration and returns the versions it applied.
// Several processes may run it at once on one database: a lock lets one
// apply the files while the others wait.
func Up(ctx context.Context, db *sql.DB, d Dialect, logger *slog.Logger) ([]int64, error) {
	p, err := provider(db, d)
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
func Version(ctx context.Context, db *sql.DB, d Dialect) (current, latest int64, err error) {
	p, err := provider(db, d)
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

func provider(db *sql.DB, d Dialect) (*goose.Provider, error) {
	fsys, err := Files(d)
	if err != nil {
		return nil, err
	}
	opts := []goose.ProviderOption{
		goose.WithTableName(VersionTable),
		goose.WithDisableGlobalRegistry(true),
	}
	var dialect goose.Dialect
	switch d {
	case PostgreSQL:
		dialect = goose.DialectPostgres
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, fmt.Errorf("migration lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	case SQLite:
		dialect = goose.DialectSQLite3
		opts = append(opts, goose.WithLocker(newSQLiteLocker()))
	}
	p, err := goose.NewProvider(dialect, db, fsys, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}
