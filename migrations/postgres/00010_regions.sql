-- +goose Up

-- Regions (docs/regions.md): this database's share of an ID space spread
-- over several regions' databases, written once by `idmint region claim`
-- (and `region split`). Without a row the database is a single region and
-- grants as before.
--   name                this region
--   worker_slot(s)      its slice of the Snowflake worker IDs: slot of slots
CREATE TABLE idmint_region (
    id           smallint    PRIMARY KEY CHECK (id = 1),
    name         text        NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,31}$'),
    worker_slot  integer     NOT NULL,
    worker_slots integer     NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (worker_slot >= 0 AND worker_slot < worker_slots AND worker_slots <= 1024)
);

-- One row per epoch of the share: the IDs [from_id, to_id) (to_id NULL:
-- up to 2^63-1) cut into blocks of block IDs, block j owned by the region
-- at j mod region_count in regions (a comma list); this database is the
-- one at region_index.
CREATE TABLE idmint_region_epochs (
    from_id      bigint  PRIMARY KEY CHECK (from_id >= 1),
    to_id        bigint  CHECK (to_id IS NULL OR to_id > from_id),
    block        bigint  NOT NULL CHECK (block >= 1),
    regions      text    NOT NULL,
    region_count integer NOT NULL CHECK (region_count BETWEEN 1 AND 64),
    region_index integer NOT NULL,
    CHECK (region_index >= 0 AND region_index < region_count)
);

-- idmint_next_owned(after): the first ID above after that this database's
-- share owns (first_id) and the last ID of its block (last_id): a grant
-- never crosses it. Without a share, after + 1 and 2^63-1 (regioned
-- false). first_id NULL: nothing owned above after (a fence, or 2^63-1).
--
-- It first takes the region lock shared, until the transaction ends: a
-- split's fence (and a claim) takes it exclusive, so that it sees the
-- max_id of every grant that read the epochs before it, and every grant
-- after it reads the fenced epochs. It is the arithmetic of the Go
-- package region (Share.NextOwned).
-- +goose StatementBegin
CREATE FUNCTION idmint_next_owned(after bigint, OUT first_id bigint, OUT last_id bigint, OUT regioned boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    e     record;
    lim   bigint;
    q     bigint;
    j     bigint;
    d     bigint;
    start bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(7300528341);
    regioned := EXISTS (SELECT 1 FROM idmint_region_epochs);
    IF NOT regioned THEN
        IF after < 9223372036854775807 THEN
            first_id := after + 1;
            last_id := 9223372036854775807;
        END IF;
        RETURN;
    END IF;
    FOR e IN SELECT * FROM idmint_region_epochs ORDER BY from_id LOOP
        lim := COALESCE(e.to_id - 1, 9223372036854775807);
        CONTINUE WHEN after >= lim;
        q := GREATEST(after + 1, e.from_id);
        j := (q - e.from_id) / e.block;
        d := (e.region_index - j % e.region_count + e.region_count) % e.region_count;
        IF d > 0 THEN
            CONTINUE WHEN j > (lim - e.from_id) / e.block - d;
            j := j + d;
            q := e.from_id + j * e.block;
        END IF;
        start := e.from_id + j * e.block;
        first_id := q;
        last_id := CASE WHEN start <= lim - (e.block - 1) THEN start + e.block - 1 ELSE lim END;
        RETURN;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION idmint_next_owned(bigint);
DROP TABLE idmint_region_epochs;
DROP TABLE idmint_region;
