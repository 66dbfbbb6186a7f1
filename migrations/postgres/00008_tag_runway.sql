-- +goose Up

-- A tag's runway: how long, in milliseconds, the instances' buffers must
-- carry its callers without the database at the recent peak rate. 0 leaves
-- the instance's --runway. At most a day: a longer runway is a larger gap
-- when an instance crashes, and max_step bounds what one range holds anyway.
ALTER TABLE idmint_tags ADD COLUMN runway_ms bigint NOT NULL DEFAULT 0
    CONSTRAINT idmint_tags_runway CHECK (runway_ms BETWEEN 0 AND 86400000);

-- +goose Down
ALTER TABLE idmint_tags DROP COLUMN runway_ms;
