package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/migrations"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("migrate", "idmint migrate [flags]", stderr)
	url := fs.String("database-url", "", "PostgreSQL URL")
	var lc logConfig
	lc.register(fs)
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := lc.logger(stderr)
	if err != nil {
		return err
	}
	if *url == "" {
		return errors.New("no database: set --database-url or IDMINT_DATABASE_URL")
	}
	store, err := allocator.OpenPostgres(ctx, *url)
	if err != nil {
		return err
	}
	defer store.Close()
	db := stdlib.OpenDBFromPool(store.Pool())
	defer db.Close()
	applied, err := migrations.Up(ctx, db, logger)
	if err != nil {
		return err
	}
	current, _, err := migrations.Version(ctx, db)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "applied %d migration(s); schema version %d\n", len(applied), current)
	return nil
}
