#!/bin/sh
# post-bootstrap.sh CONNINFO: Patroni runs it once, on the node that
# initialises the cluster, with a superuser connection string. It creates
# the role idmint connects as and its database. pg_monitor lets idmint read
# pg_stat_replication and the replication slots, so that it serves a grant
# only once the standbys have it (--replicas-required auto); without it
# idmint cannot wait and says so on /id/health. The password comes from
# IDMINT_DB_PASSWORD in Patroni's environment.
set -eu
: "${IDMINT_DB_PASSWORD:?set IDMINT_DB_PASSWORD in Patroni's environment}"
psql "$1" -v ON_ERROR_STOP=1 -q -v pw="$IDMINT_DB_PASSWORD" <<'SQL'
CREATE ROLE idmint LOGIN PASSWORD :'pw' IN ROLE pg_monitor;
CREATE DATABASE idmint OWNER idmint;
SQL
