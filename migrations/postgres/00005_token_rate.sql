-- +goose Up

-- A token's own bound on the IDs it may take per second; NULL: the
-- instance's --ids-per-second-per-token. Set when the token is made; a
-- different bound is a new token.
ALTER TABLE idmint_tokens ADD COLUMN ids_per_second double precision
    CHECK (ids_per_second > 0 AND ids_per_second <= 1e12);

-- +goose Down
ALTER TABLE idmint_tokens DROP COLUMN ids_per_second;
