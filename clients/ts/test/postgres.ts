// A throwaway PostgreSQL cluster for the tests of regions: initdb in a
// temporary directory, served on a free loopback port (fsync off), one
// database per region, stopped when the test process exits. As root, the
// server runs as the postgres user (PostgreSQL refuses to run as root).
// The binaries are found in $IDMINT_TEST_PG_BIN, `pg_config --bindir` or
// /usr/lib/postgresql/*/bin.

import { execFileSync, type ExecFileSyncOptions } from "node:child_process";
import { appendFileSync, chownSync, existsSync, readdirSync } from "node:fs";
import { userInfo } from "node:os";
import { join } from "node:path";
import { freePort, tempDir } from "./server.js";

function binDir(): string {
  const candidates: string[] = [];
  if (process.env["IDMINT_TEST_PG_BIN"]) candidates.push(process.env["IDMINT_TEST_PG_BIN"]);
  try {
    candidates.push(execFileSync("pg_config", ["--bindir"], { encoding: "utf8" }).trim());
  } catch {
    // no pg_config on PATH
  }
  if (existsSync("/usr/lib/postgresql")) {
    for (const v of readdirSync("/usr/lib/postgresql").sort((a, b) => Number(b) - Number(a))) {
      candidates.push(`/usr/lib/postgresql/${v}/bin`);
    }
  }
  const dir = candidates.find((d) => ["initdb", "pg_ctl", "postgres", "psql"].every((b) => existsSync(join(d, b))));
  if (dir === undefined) {
    throw new Error(`no PostgreSQL server binaries (initdb, pg_ctl, postgres, psql) found; looked in ${candidates.join(", ")}`);
  }
  return dir;
}

/** Postgres is one local cluster. */
export class Postgres {
  private dbs = 0;

  private constructor(
    private readonly bin: string,
    private readonly data: string,
    readonly port: number,
    private readonly as: ExecFileSyncOptions,
  ) {}

  static async start(): Promise<Postgres> {
    const bin = binDir();
    const dir = tempDir();
    const as: ExecFileSyncOptions = { cwd: dir, stdio: ["ignore", "pipe", "pipe"] };
    if (userInfo().uid === 0) {
      const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }));
      const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }));
      chownSync(dir, uid, gid);
      as.uid = uid;
      as.gid = gid;
    }
    const data = join(dir, "data");
    execFileSync(join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"], as);
    const port = await freePort();
    appendFileSync(join(data, "postgresql.conf"), `\nlisten_addresses = '127.0.0.1'\nport = ${port}\nunix_socket_directories = '${dir}'\nfsync = off\nmax_connections = 200\n`);
    execFileSync(join(bin, "pg_ctl"), ["-D", data, "-l", join(dir, "postgres.log"), "-w", "-t", "60", "start"], as);
    const pg = new Postgres(bin, data, port, as);
    process.on("exit", () => {
      try {
        execFileSync(join(bin, "pg_ctl"), ["-D", data, "-m", "immediate", "-w", "stop"], as);
      } catch {
        // already stopped
      }
    });
    return pg;
  }

  /** database makes a new database and returns its URL. */
  database(): string {
    const name = `idmint_${++this.dbs}`;
    this.psql("postgres", `CREATE DATABASE ${name}`);
    return this.url(name);
  }

  private url(name: string): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${name}?sslmode=disable`;
  }

  /** query runs sql in the database of url and returns its rows, fields split on "|". */
  query(url: string, sql: string): string[][] {
    const name = new URL(url).pathname.slice(1);
    const out = this.psql(name, sql);
    return out
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => l.split("|"));
  }

  private psql(db: string, sql: string): string {
    return execFileSync(join(this.bin, "psql"), ["-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", String(this.port), "-U", "postgres", "-d", db, "-c", sql], {
      ...this.as,
      encoding: "utf8",
    }) as string;
  }
}
