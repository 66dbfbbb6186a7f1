-- +goose Up

-- PostgreSQL only (postgres/00006_standbys.sql: standbys that hold grants
-- back); SQLite has no replication. The version is kept so that both
-- dialects number their files alike.
SELECT 1;

-- +goose Down
SELECT 1;
