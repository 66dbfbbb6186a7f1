package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idmint/idmint/allocator"
	"github.com/idmint/idmint/migrations"
)

// openPostgres connects, optionally migrates, and checks that the schema is
// the one this binary knows.
func openPostgres(ctx context.Context, url string, migrate bool, logger *slog.Logger) (*allocator.Postgres, error) {
	store, err := allocator.OpenPostgres(ctx, url)
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDBFromPool(store.Pool())
	defer db.Close()
	if migrate {
		if _, err := migrations.Up(ctx, db, logger); err != nil {
			store.Close()
			return nil, err
		}
	}
	current, latest, err := migrations.Version(ctx, db)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("%w (is the database migrated? run: idmint migrate)", err)
	}
	if current < latest {
		store.Close()
		return nil, fmt.Errorf("database schema is at version %d, this idmint needs %d: run idmint migrate (or serve --migrate)", current, latest)
	}
	return store, nil
}
