-- +goose Up

-- The Snowflake layout, once per database: instances with another layout
-- refuse to start, since their IDs would overlap these.
CREATE TABLE idmint_snowflake_layout (
    id            smallint    PRIMARY KEY CHECK (id = 1),
    epoch_ms      bigint      NOT NULL CHECK (epoch_ms >= 0),
    time_bits     smallint    NOT NULL CHECK (time_bits BETWEEN 35 AND 55),
    worker_bits   smallint    NOT NULL CHECK (worker_bits BETWEEN 1 AND 16),
    sequence_bits smallint    NOT NULL CHECK (sequence_bits BETWEEN 1 AND 22),
    created_at    timestamptz NOT NULL DEFAULT now(),
    CHECK (time_bits + worker_bits + sequence_bits = 63),
    UNIQUE (id, worker_bits)
);

-- One row per worker ID, leased to one instance at a time. Times are Unix
-- milliseconds by the database's clock.
--   epoch            fencing token: grows by one for every new holder;
--                    renewals and releases name it, so a holder that lost
--                    the row can neither renew nor release it
--   released         the last holder released it (it may be taken at once)
--   lease_expires_ms the lease ends then unless renewed
--   time_floor_ms    no holder ever used a later millisecond: the end of the
--                    holder's window (raised at acquire and every renewal),
--                    or the last millisecond used (at release). The next
--                    holder starts after it.
-- The worker ID is within the layout's range by construction and by the
-- CHECK, whose worker_bits must be the layout's (the foreign key).
CREATE TABLE idmint_snowflake_workers (
    worker_id        integer     PRIMARY KEY,
    layout_id        smallint    NOT NULL DEFAULT 1,
    worker_bits      smallint    NOT NULL,
    holder           text        NOT NULL DEFAULT '' CHECK (length(holder) <= 200),
    epoch            bigint      NOT NULL DEFAULT 0 CHECK (epoch >= 0),
    released         boolean     NOT NULL DEFAULT true,
    lease_expires_ms bigint      NOT NULL DEFAULT 0 CHECK (lease_expires_ms >= 0),
    time_floor_ms    bigint      NOT NULL DEFAULT 0 CHECK (time_floor_ms >= 0),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (worker_id >= 0 AND worker_id < (1 << worker_bits)),
    FOREIGN KEY (layout_id, worker_bits) REFERENCES idmint_snowflake_layout (id, worker_bits)
);

-- +goose Down
DROP TABLE idmint_snowflake_workers;
DROP TABLE idmint_snowflake_layout;
