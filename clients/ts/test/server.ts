// Real `idmint serve` processes for the tests: the binary is built from the
// repository (go build -o <tmp>/idmint ./cmd/idmint) once per test
// process, and each server runs on its own SQLite file, on a free loopback
// port, stopped by stop() (SIGTERM, then SIGKILL).

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// dist/test/ of clients/ts: the repository is four levels up.
const repo = resolve(fileURLToPath(new URL(".", import.meta.url)), "../../../..");

let binary: string | undefined;
const scratch: string[] = [];

process.on("exit", () => {
  for (const d of scratch) {
    rmSync(d, { recursive: true, force: true });
  }
});

/** tempDir returns a new directory, removed when the process exits. */
export function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), "idmint-ts-"));
  scratch.push(d);
  return d;
}

/** idmint returns the path of the idmint binary, building it on first use. */
export function idmint(): string {
  if (binary === undefined) {
    const out = join(tempDir(), "idmint");
    execFileSync("go", ["build", "-o", out, "./cmd/idmint"], { cwd: repo, stdio: ["ignore", "inherit", "inherit"] });
    binary = out;
  }
  return binary;
}

/** run runs an idmint command and returns its stdout. */
export function run(args: string[]): string {
  return execFileSync(idmint(), args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** freePort returns a loopback port nobody listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export interface TagSpec {
  name: string;
  step?: number;
  maxStep?: number;
}

export interface ServerOptions {
  tags: TagSpec[];
  /** Tokens to create before serving: name → scope list. */
  tokens?: Record<string, string>;
  /** --auth token when set. */
  auth?: boolean;
  /** Serve HTTPS with idmint dev-certs' files; with mTLS, ask for client certificates. */
  tls?: "tls" | "mtls";
  /** Serve another server's SQLite file (its tags and tokens) instead of a new one. */
  shareWith?: Server;
  /** --range-grants-per-second (default 0: unlimited). */
  rangeGrantsPerSecond?: number;
  /** Serve this database (--database-url) instead of a SQLite file; its tags are made beforehand. */
  databaseUrl?: string;
  /** --region NAME: the region whose share the database was claimed with. */
  region?: string;
  /** Listen on this port (a restart) instead of a free one. */
  port?: number;
}

/** Server is one running `idmint serve`. */
export class Server {
  private constructor(
    readonly url: string,
    readonly port: number,
    readonly dataDir: string,
    /** The tokens made for it, by name. */
    readonly tokens: Record<string, string>,
    /** The dev-certs directory (ca.pem, client.pem, client-key.pem) with tls. */
    readonly certs: string | undefined,
    private readonly proc: ChildProcess,
    private readonly logFile: string,
  ) {}

  static async start(opts: ServerOptions): Promise<Server> {
    const dir = tempDir();
    const data = opts.shareWith?.dataDir ?? join(dir, "data");
    for (const t of opts.shareWith || opts.databaseUrl ? [] : opts.tags) {
      const args = ["tag", "create", t.name, "--data-dir", data];
      if (t.step !== undefined) args.push("--step", String(t.step));
      if (t.maxStep !== undefined) args.push("--max-step", String(t.maxStep));
      run(args);
    }
    const tokens: Record<string, string> = { ...opts.shareWith?.tokens };
    for (const [name, scope] of Object.entries(opts.shareWith ? {} : (opts.tokens ?? {}))) {
      tokens[name] = run(["token", "create", "--data-dir", data, "--name", name, "--scope", scope]).trim();
    }
    const port = opts.port ?? (await freePort());
    const store = opts.databaseUrl ? ["--database-url", opts.databaseUrl, "--prune-after", "0"] : ["--data-dir", data];
    if (opts.region) store.push("--region", opts.region);
    const args = ["serve", ...store, "--listen", `127.0.0.1:${port}`, "--range-grants-per-second", String(opts.rangeGrantsPerSecond ?? 0), "--snowflake=false", "--log-format", "text", "--grpc-listen", "off"];
    if (opts.auth) args.push("--auth", "token");
    let certs: string | undefined;
    if (opts.tls) {
      certs = join(dir, "certs");
      run(["dev-certs", "--dir", certs]);
      args.push("--tls-cert", join(certs, "server.pem"), "--tls-key", join(certs, "server-key.pem"));
      if (opts.tls === "mtls") args.push("--tls-client-ca", join(certs, "ca.pem"));
    }
    const logFile = join(dir, "serve.log");
    const log = openSync(logFile, "a");
    const proc = spawn(idmint(), args, { stdio: ["ignore", log, log] });
    const scheme = opts.tls ? "https" : "http";
    const s = new Server(`${scheme}://127.0.0.1:${port}`, port, data, tokens, certs, proc, logFile);
    await s.waitListening();
    return s;
  }

  // waitListening polls the port until serve accepts connections (at most 30 s).
  private async waitListening(): Promise<void> {
    const { connect } = await import("node:net");
    const until = Date.now() + 30_000;
    while (Date.now() < until) {
      if (this.proc.exitCode !== null) {
        throw new Error(`idmint serve exited ${this.proc.exitCode}: ${this.log()}`);
      }
      const ok = await new Promise<boolean>((resolve) => {
        const c = connect(this.port, "127.0.0.1");
        c.once("connect", () => {
          c.destroy();
          resolve(true);
        });
        c.once("error", () => resolve(false));
      });
      if (ok) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`idmint serve did not listen within 30s: ${this.log()}`);
  }

  log(): string {
    return readFileSync(this.logFile, "utf8");
  }

  /** kill ends the server at once (SIGKILL), as a crash would. */
  async kill(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => this.proc.once("exit", () => r()));
    this.proc.kill("SIGKILL");
    await exited;
  }

  /** stop ends the server: SIGTERM, SIGKILL after 10 s. */
  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => this.proc.once("exit", () => r()));
    this.proc.kill("SIGTERM");
    const t = setTimeout(() => this.proc.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(t);
  }
}
