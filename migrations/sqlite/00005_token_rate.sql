-- +goose Up

-- The SQLite twin of postgres/00005_token_rate.sql.
ALTER TABLE idmint_tokens ADD COLUMN ids_per_second REAL
    CHECK (ids_per_second > 0 AND ids_per_second <= 1e12);

-- +goose Down
ALTER TABLE idmint_tokens DROP COLUMN ids_per_second;
