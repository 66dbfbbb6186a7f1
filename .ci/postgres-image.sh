#!/usr/bin/env bash
# postgres-image.sh builds a PostgreSQL image for the integration tests without
# any container registry: a minimal Debian root file system made by debootstrap
# from Debian's archive, plus an entrypoint that behaves like the official
# postgres image's where testcontainers' modules/postgres and docker compose
# rely on it (POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, `postgres -c k=v`
# command lines, /docker-entrypoint-initdb.d, no re-init of an existing data
# directory so a stopped container restarts with its data).
#
# Usage: .ci/postgres-image.sh [IMAGE]   (default idmint-postgres:15)
# Idempotent: does nothing when the image exists; FORCE=1 rebuilds it.
# Needs root, debootstrap and a running Docker engine.
set -euo pipefail

image=${1:-${IDMINT_POSTGRES_IMAGE_NAME:-idmint-postgres:15}}
suite=bookworm
pg_major=15

old_id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
if [[ "${FORCE:-0}" != 1 && -n "$old_id" ]]; then
	echo "postgres-image: $image exists, skipping (FORCE=1 rebuilds)"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "postgres-image: must run as root (debootstrap)" >&2
	exit 1
fi
if ! command -v debootstrap >/dev/null; then
	echo "postgres-image: debootstrap not found (apt-get install debootstrap)" >&2
	exit 1
fi

work=$(mktemp -d "${TMPDIR:-/var/tmp}/idmint-pgimage.XXXXXX")
rootfs=$work/rootfs
cleanup() {
	# debootstrap mounts /proc and /sys inside the root while it runs; never
	# rm -rf through a mount left behind by an interrupted run.
	local m
	while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done < <(awk -v r="$rootfs/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r)
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT

start=$SECONDS
echo "postgres-image: debootstrap $suite with postgresql-$pg_major into $rootfs"
if ! debootstrap --variant=minbase --include="postgresql-$pg_major" "$suite" "$rootfs" >"$work/debootstrap.log" 2>&1; then
	tail -n 50 "$work/debootstrap.log" >&2
	tail -n 50 "$rootfs/debootstrap/debootstrap.log" >&2 2>/dev/null || true
	echo "postgres-image: debootstrap failed" >&2
	exit 1
fi
echo "postgres-image: debootstrap took $((SECONDS - start))s"

# postgresql-common's postinst created (and may have started) a "main"
# cluster; the entrypoint makes its own data directory instead.
pidfile=$rootfs/var/lib/postgresql/$pg_major/main/postmaster.pid
if [[ -f $pidfile ]]; then
	pid=$(head -n 1 "$pidfile")
	# Only a server running inside this root file system.
	if [[ $(readlink "/proc/$pid/root" 2>/dev/null) == "$rootfs" ]]; then
		kill -INT "$pid" 2>/dev/null || true
		sleep 2
	fi
fi
rm -rf "$rootfs/var/lib/postgresql/$pg_major" "$rootfs/etc/postgresql/$pg_major"

# Strip what a test server never needs.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
	"$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/debconf/*-old \
	"$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
	"$rootfs"/usr/share/locale/* "$rootfs"/var/log/* "$rootfs"/debootstrap \
	"$rootfs"/tmp/* "$rootfs"/var/tmp/*
find "$rootfs/dev" -mindepth 1 -delete
# The JIT provider pulls in LLVM and z3 (about 130 MB); without llvmjit.so the
# server just runs without JIT (pg_jit_available() is false).
rm -rf "$rootfs"/usr/lib/postgresql/*/lib/llvmjit* "$rootfs"/usr/lib/postgresql/*/lib/bitcode \
	"$rootfs"/usr/lib/*-linux-gnu/libLLVM* "$rootfs"/usr/lib/*-linux-gnu/libz3.so* \
	"$rootfs"/usr/share/i18n

install -d -m 0755 "$rootfs/docker-entrypoint-initdb.d"
cat >"$rootfs/usr/local/bin/docker-entrypoint.sh" <<'ENTRYPOINT'
#!/bin/sh
# docker-entrypoint.sh: initialise a data directory on first start (only when
# $PGDATA has no PG_VERSION), then exec the server as user postgres.
set -eu

pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
export PATH="$pgbin:$PATH"
export PGDATA="${PGDATA:-/var/lib/postgresql/data}"

# `docker run IMAGE -c k=v` means `postgres -c k=v`.
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
	set -- postgres "$@"
fi
if [ "$1" != postgres ]; then
	exec "$@"
fi

if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chmod 0700 "$PGDATA"
	chmod 2775 /var/run/postgresql
	find "$PGDATA" /var/run/postgresql \! -user postgres -exec chown postgres:postgres {} +
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	user="${POSTGRES_USER:-postgres}"
	db="${POSTGRES_DB:-$user}"
	auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
	if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
		echo "error: POSTGRES_PASSWORD is not set (or set POSTGRES_HOST_AUTH_METHOD=trust)" >&2
		exit 1
	fi

	pwfile=
	if [ -n "${POSTGRES_PASSWORD:-}" ]; then
		pwfile=$(mktemp)
		printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	fi
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a word list
	initdb --username="$user" ${pwfile:+--pwfile="$pwfile"} \
		--encoding=UTF8 --locale=C.UTF-8 \
		--auth-local=trust --auth-host="$auth" --no-sync ${POSTGRES_INITDB_ARGS:-}
	[ -z "$pwfile" ] || rm -f "$pwfile"
	printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"
	printf "\nlisten_addresses = '*'\n" >>"$PGDATA/postgresql.conf"

	# A server on the socket only, for creating the database and running
	# init scripts. Local socket auth is trust, so no password is needed.
	# This is a test image: neither initdb nor this server syncs to disk
	# (saves seconds per container; only an OS crash could lose the data).
	pg_ctl -D "$PGDATA" -w -t 60 -o "-c listen_addresses='' -c fsync=off" start
	export PGHOST=/var/run/postgresql PGUSER="$user"
	if [ "$db" != postgres ]; then
		exists=$(psql -X -v ON_ERROR_STOP=1 -d postgres -tA --set db="$db" <<-'SQL'
			SELECT 1 FROM pg_database WHERE datname = :'db';
		SQL
		)
		if [ -z "$exists" ]; then
			psql -X -v ON_ERROR_STOP=1 -d postgres --set db="$db" <<-'SQL'
				CREATE DATABASE :"db";
			SQL
		fi
	fi
	export PGDATABASE="$db"
	for f in /docker-entrypoint-initdb.d/*; do
		[ -e "$f" ] || continue
		case "$f" in
		*.sh)
			# shellcheck source=/dev/null
			if [ -x "$f" ]; then "$f"; else . "$f"; fi
			;;
		*.sql) psql -X -v ON_ERROR_STOP=1 -f "$f" ;;
		*.sql.gz) gzip -dc "$f" | psql -X -v ON_ERROR_STOP=1 ;;
		*) echo "ignoring $f" ;;
		esac
	done
	unset PGHOST PGUSER PGDATABASE
	pg_ctl -D "$PGDATA" -m fast -w stop
	echo "PostgreSQL init process complete; ready for start up."
else
	echo "PostgreSQL data directory $PGDATA exists; skipping initialisation"
fi

exec "$@"
ENTRYPOINT
chmod 0755 "$rootfs/usr/local/bin/docker-entrypoint.sh"

pgbin=$(cd "$rootfs" && ls -d usr/lib/postgresql/*/bin | sort -V | tail -n 1)
start=$SECONDS
# docker import cannot set STOPSIGNAL, so the import yields a bare root file
# system and a one-stage build (classic builder, no context) adds the config.
# SIGINT is PostgreSQL's fast shutdown; the default SIGTERM would wait for
# every client to disconnect.
rootfs_id=$(tar --numeric-owner -C "$rootfs" -c . | docker import -m "Debian $suite with PostgreSQL $pg_major" -)
DOCKER_BUILDKIT=0 docker build -q -t "$image" - >/dev/null 2>"$work/build.log" <<DOCKERFILE || { cat "$work/build.log" >&2; exit 1; }
FROM $rootfs_id
ENV PATH=/$pgbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
DOCKERFILE
echo "postgres-image: imported $image in $((SECONDS - start))s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%d MB", $1/1e6}'))"
new_id=$(docker image inspect -f '{{.Id}}' "$image")
if [[ -n "$old_id" && "$old_id" != "$new_id" ]]; then
	docker image rm "$old_id" >/dev/null 2>&1 || true
fi
