-- +goose Up

-- The standbys idmint has seen streaming from the primary, so that one
-- that disconnects still holds grants back (it could be promoted with what
-- it has) even for an instance started after it left. A row counts only on
-- the timeline it was seen on: after a failover, the new primary's own
-- standbys are recorded again. name is the replication slot's name when
-- the standby streams through one (slot true: the slot, not this row,
-- says whether it is still a candidate), else application_name@address.
-- forgotten_at is set by an operator (idmint standby forget): the standby
-- no longer counts until it is seen streaming again.
CREATE TABLE idmint_standbys (
    name           text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    slot           boolean NOT NULL,
    timeline       bigint NOT NULL CHECK (timeline > 0),
    first_seen     timestamptz NOT NULL DEFAULT now(),
    last_seen      timestamptz NOT NULL DEFAULT now(),
    last_flush_lsn pg_lsn,
    forgotten_at   timestamptz
);

-- +goose Down
DROP TABLE idmint_standbys;
