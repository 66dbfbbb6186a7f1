// The conformance program (clients/ts/conformance) as the conformance
// harness runs it: against real instances, over mTLS, and through a lossy
// proxy with an instance SIGKILLed mid-run.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { createClient } from "../src/index.js";
import { LossyProxy } from "./proxy.js";
import { Server } from "./server.js";

const program = fileURLToPath(new URL("../../conformance", import.meta.url));

interface Run {
  code: number | null;
  ids: bigint[];
  stderr: string;
}

// conformance runs the program; onLine, if set, sees the count of lines
// printed so far as they come.
function conformance(args: string[], onLines?: (n: number) => void): Promise<Run> {
  return new Promise((resolve, reject) => {
    const p = spawn(program, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    let lines = 0;
    p.stdout.setEncoding("utf8").on("data", (d: string) => {
      out += d;
      for (const ch of d) if (ch === "\n") lines++;
      onLines?.(lines);
    });
    p.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
    p.once("error", reject);
    p.once("close", (code) => {
      const ids = out.split("\n").filter((l) => l !== "").map((l) => BigInt(l));
      resolve({ code, ids, stderr: err });
    });
  });
}

function assertUnique(ids: bigint[]): void {
  assert.equal(new Set(ids).size, ids.length, "an ID printed twice");
}

let one: Server; // mTLS, --auth token
let a: Server; // two instances on one SQLite file
let b: Server;

before(async () => {
  [one, a] = await Promise.all([
    Server.start({ auth: true, tls: "mtls", tags: [{ name: "conf", step: 100 }], tokens: { ids: "ids" } }),
    Server.start({ tags: [{ name: "faults", step: 200, maxStep: 2000 }] }),
  ]);
  b = await Server.start({ tags: [], shareWith: a });
});

after(async () => {
  await Promise.all([one?.stop(), a?.stop(), b?.stop()]);
});

test("conformance: --count IDs over mTLS from 4 loops, one a line, the tail given back", async () => {
  const certs = one.certs!;
  const tls = ["--ca", `${certs}/ca.pem`, "--cert", `${certs}/client.pem`, "--key", `${certs}/client-key.pem`];
  const r = await conformance(["--url", one.url, "--tag", "conf", "--count", "20000", "--threads", "4", "--token", one.tokens["ids"]!, ...tls]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.ids.length, 20000);
  assertUnique(r.ids);
  const max = r.ids.reduce((m, x) => (x > m ? x : m), 0n);
  assert.equal(max, 20000n, "one client alone: IDs 1..count");
  // Given back on close: the next caller starts right after them.
  const c = createClient({ urls: one.url, token: one.tokens["ids"], ca: `${certs}/ca.pem`, cert: `${certs}/client.pem`, key: `${certs}/client-key.pem` });
  assert.equal(await c.next("conf"), 20001n);
  await c.close();
});

test("conformance: through lossy proxies, one instance SIGKILLed mid-run, every call succeeds, no ID twice", async () => {
  const proxies = await Promise.all([LossyProxy.start(a.port), LossyProxy.start(b.port)]);
  try {
    // A share of whatever each instance sends back is reset: replies to
    // grants that committed among them.
    proxies.forEach((p) => p.resetShare(0.3));
    const count = 200_000;
    let killed: Promise<void> | undefined;
    const r = await conformance(["--url", proxies.map((p) => p.url).join(","), "--tag", "faults", "--count", String(count), "--threads", "4"], (n) => {
      if (killed === undefined && n >= count / 3) {
        killed = a.kill();
      }
    });
    await killed;
    assert.ok(killed !== undefined, "the instance was killed mid-run");
    const drops = proxies.reduce((n, p) => n + p.drops, 0);
    process.stderr.write(r.stderr.split("\n").filter((l) => l.includes(" ids of ")).join("\n") + ` (${drops} chunks reset by the proxies)\n`);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.ids.length, count);
    assertUnique(r.ids);
  } finally {
    await Promise.all(proxies.map((p) => p.close()));
  }
});

test("conformance: exits 1 on a refusal, 2 on bad flags", async () => {
  const r = await conformance(["--url", one.url, "--tag", "no-such-tag", "--count", "10", "--ca", `${one.certs}/ca.pem`, "--cert", `${one.certs}/client.pem`, "--key", `${one.certs}/client-key.pem`, "--token", one.tokens["ids"]!]);
  assert.equal(r.code, 1);
  assert.equal(r.ids.length, 0);
  assert.match(r.stderr, /FAILED: unknown_tag/);
  const bad = await conformance(["--url", one.url, "--tag", "conf", "--count", "0"]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--count "0"/);
});
