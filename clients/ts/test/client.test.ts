// The client against real `idmint serve` processes (SQLite): concurrency,
// a lost reply, refusals, give-back on close, TLS with client
// certificates, worker threads and the browser-safe entry.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { Worker } from "node:worker_threads";
import { Code } from "@connectrpc/connect";
import { createConnectTransport as createWebTransport, createGrpcWebTransport } from "@connectrpc/connect-web";
import { createClient, createClientWithTransports, IdmintError, type Client } from "../src/index.js";
import { LossyProxy } from "./proxy.js";
import { Server, freePort } from "./server.js";

let plain: Server; // h2c, --auth token
let secure: Server; // HTTPS with client certificates, --auth token
let token: string; // scope ids
let narrow: string; // scope ids:narrow only

before(async () => {
  [plain, secure] = await Promise.all([
    Server.start({
      auth: true,
      tags: [
        { name: "conc", step: 50, maxStep: 500 },
        { name: "alone", step: 20, maxStep: 200 },
        { name: "lost", step: 100 },
        { name: "lost2", step: 100 },
        { name: "gb", step: 100 },
        { name: "pre", step: 100 },
        { name: "ready", step: 100 },
        { name: "workers", step: 100, maxStep: 1000 },
        { name: "web", step: 100 },
        { name: "narrow", step: 10 },
      ],
      tokens: { ids: "ids", narrow: "ids:narrow" },
    }),
    Server.start({ auth: true, tls: "mtls", tags: [{ name: "tls", step: 100 }], tokens: { ids: "ids" } }),
  ]);
  token = plain.tokens["ids"]!;
  narrow = plain.tokens["narrow"]!;
});

after(async () => {
  await Promise.all([plain?.stop(), secure?.stop()]);
});

// take runs loops concurrent loops on c, each taking per IDs of tag, and
// returns each loop's IDs in the order it got them.
async function take(c: Client, tag: string, loops: number, per: number): Promise<bigint[][]> {
  return Promise.all(
    Array.from({ length: loops }, async () => {
      const ids: bigint[] = [];
      for (let i = 0; i < per; i++) ids.push(await c.next(tag));
      return ids;
    }),
  );
}

function assertIncreasing(ids: bigint[], what: string): void {
  for (let i = 1; i < ids.length; i++) {
    assert.ok(ids[i]! > ids[i - 1]!, `${what}: ${ids[i]} after ${ids[i - 1]}`);
  }
}

function assertUnique(ids: bigint[]): void {
  const seen = new Set<bigint>();
  for (const id of ids) {
    assert.ok(!seen.has(id), `ID ${id} handed out twice`);
    seen.add(id);
  }
}

describe("ranges", () => {
  test("one client's concurrent callers get consecutive IDs, each once, with no gap", async () => {
    const c = createClient({ urls: plain.url, token, closeTimeoutMs: 5000 });
    const loops = await take(c, "alone", 64, 100);
    loops.forEach((ids, i) => assertIncreasing(ids, `loop ${i}`));
    const all = loops.flat().sort((a, b) => (a < b ? -1 : 1));
    // One client alone on the tag: its ranges follow each other, so the
    // IDs are exactly 1..6400.
    assert.equal(all.length, 6400);
    all.forEach((id, i) => assert.equal(id, BigInt(i + 1)));
    assert.ok(c.stats().tags[0]!.loads > 1, "more than one range granted");
    await c.close();
  });

  test("clients side by side with many callers never share an ID", async () => {
    const clients = Array.from({ length: 4 }, () => createClient({ urls: plain.url, token }));
    const got = await Promise.all(clients.map((c) => take(c, "conc", 25, 200)));
    const batches = await Promise.all(clients.map((c) => c.nextN("conc", 777)));
    got.flat().forEach((ids, i) => assertIncreasing(ids, `loop ${i}`));
    batches.forEach((ids, i) => {
      assert.equal(ids.length, 777);
      assertIncreasing(ids, `batch ${i}`);
    });
    const all = [...got.flat(2), ...batches.flat()];
    assert.equal(all.length, 4 * 25 * 200 + 4 * 777);
    assertUnique(all);
    const loads = clients.reduce((n, c) => n + c.stats().tags[0]!.loads, 0);
    assert.ok(loads >= 8, `${loads} ranges granted: the step (50, max 500) makes many`);
    await Promise.all(clients.map((c) => c.close()));
  });

  test("the next range is fetched in the background before the current one runs out", async () => {
    const c = createClient({ urls: plain.url, token });
    const first = await c.next("pre");
    assert.equal(first, 1n);
    for (let i = 0; i < 10; i++) await c.next("pre"); // past the 10% threshold of 100
    const until = Date.now() + 10_000;
    while (c.stats().tags[0]!.next === undefined && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 10));
    }
    const st = c.stats().tags[0]!;
    assert.deepEqual(st.current, { first: 1n, last: 100n });
    assert.ok(st.next !== undefined && st.next.first === 101n, `next range ${JSON.stringify(st.next, (_, v) => String(v))}`);
    assert.equal(c.stats().requests, 2);
    await c.close();
  });
});

describe("ready", () => {
  test("loads the first range of the tags without taking an ID", async () => {
    const c = createClient({ urls: plain.url, token, tags: ["ready"] });
    await c.ready();
    const st = c.stats();
    assert.equal(st.requests, 1);
    assert.equal(st.tags[0]!.loads, 1);
    assert.equal(st.tags[0]!.issued, 0);
    assert.equal(await c.next("ready"), 1n);
    assert.equal(c.stats().requests, 1, "served from the range ready loaded");
    await assert.rejects(c.ready(["no-such-tag"]), (e: unknown) => e instanceof IdmintError && e.code === "unknown_tag");
    await c.close();
  });
});

describe("a lost reply", () => {
  test("is recovered under the same request ID, and its range served", async () => {
    const proxy = await LossyProxy.start(plain.port);
    try {
      // HTTP/1.1 through the proxy: the server sends nothing but replies,
      // so the first bytes back after the request are the grant's reply,
      // sent after the grant committed.
      const c = createClient({ urls: proxy.url, token, httpVersion: "1.1", retryMinMs: 5, retryMaxMs: 50 });
      proxy.dropReplies(1);
      const id = await c.next("lost");
      assert.equal(proxy.drops, 1);
      // The range of the lost reply is the one served: the tag's first ID.
      assert.equal(id, 1n);
      const st = c.stats();
      assert.equal(st.tags[0]!.recovered, 1, "the retry's reply says the request ID had been granted");
      assert.equal(st.tags[0]!.loads, 1);
      assert.equal(st.requests, 2, "the lost attempt and its retry");
      await c.close();
    } finally {
      await proxy.close();
    }
  });

  test("is recovered on the next instance", async () => {
    const proxy = await LossyProxy.start(plain.port);
    try {
      const c = createClient({ urls: [proxy.url, plain.url], token, httpVersion: "1.1", retryMinMs: 5, retryMaxMs: 50 });
      proxy.dropReplies(1);
      const ids = await take(c, "lost2", 8, 50);
      assertUnique(ids.flat());
      assert.equal(proxy.drops, 1);
      assert.equal(c.stats().tags[0]!.recovered, 1);
      // Every ID from 1 on: no range was lost with its reply.
      assert.equal(ids.flat().reduce((m, x) => (x > m ? x : m), 0n), 400n);
      await c.close();
    } finally {
      await proxy.close();
    }
  });
});

describe("refusals", () => {
  async function refusal(c: Client, tag: string): Promise<IdmintError> {
    const err = await c.next(tag).then(
      () => assert.fail("no error"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof IdmintError, `${err}`);
    return err;
  }

  test("an unknown tag is final, typed, asked once and then answered from memory", async () => {
    const c = createClient({ urls: plain.url, token });
    const err = await refusal(c, "no-such-tag");
    assert.equal(err.code, "unknown_tag");
    assert.equal(err.connectCode, Code.NotFound);
    assert.equal(err.final, true);
    assert.equal(err.tag, "no-such-tag");
    assert.equal(c.stats().requests, 1);
    const again = await refusal(c, "no-such-tag");
    assert.equal(again.code, "unknown_tag");
    assert.equal(c.stats().requests, 1, "answered from memory");
    await c.close();
  });

  test("a token outside the tag's scope is forbidden, asked once per call", async () => {
    const c = createClient({ urls: [plain.url, plain.url], token: narrow });
    const err = await refusal(c, "conc");
    assert.equal(err.code, "forbidden");
    assert.equal(err.connectCode, Code.PermissionDenied);
    assert.equal(err.final, true);
    assert.equal(c.stats().requests, 1, "not retried, not on the other instance");
    assert.equal(await c.next("narrow"), 1n, "its own tag is served");
    await c.close();
  });

  test("no token, or a wrong one, is unauthorized", async () => {
    for (const t of [undefined, "idm_nope_nope"]) {
      const c = createClient({ urls: plain.url, token: t });
      const err = await refusal(c, "conc");
      assert.equal(err.code, "unauthorized");
      assert.equal(err.connectCode, Code.Unauthenticated);
      assert.equal(err.final, true);
      assert.equal(c.stats().requests, 1);
      await c.close();
    }
  });

  test("an invalid tag is refused before any request", async () => {
    const c = createClient({ urls: plain.url, token });
    const err = await refusal(c, "bad tag!");
    assert.equal(err.code, "invalid_biz_tag");
    assert.equal(err.final, true);
    assert.equal(c.stats().requests, 0);
    await assert.rejects(c.nextN("conc", 0), (e: unknown) => e instanceof IdmintError && e.code === "bad_argument");
    await c.close();
  });

  test("no instance answering is unavailable, not final, after bounded retries", async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const c = createClient({ urls: [dead], token, loadTimeoutMs: 500, waitTimeoutMs: 2000, retryMinMs: 10, retryMaxMs: 50 });
    const err = await refusal(c, "conc");
    assert.equal(err.code, "unavailable");
    assert.equal(err.final, false);
    const sent = c.stats().requests;
    assert.ok(sent >= 2 && sent <= 60, `${sent} attempts within the load's 500 ms`);
    // During the backoff it fails fast, without a request.
    const fast = await refusal(c, "conc");
    assert.equal(fast.code, "unavailable");
    assert.ok(fast.retryAfterMs !== undefined && fast.retryAfterMs > 0);
    assert.equal(c.stats().requests, sent);
    await c.close();
  });
});

describe("a rate limit", () => {
  test("is waited out as its RetryInfo says, under the same request ID", async () => {
    const limited = await Server.start({ tags: [{ name: "rl", step: 10, maxStep: 10 }, { name: "rl2", step: 10, maxStep: 10 }], rangeGrantsPerSecond: 1 });
    try {
      // Two grants pass (the burst), the third waits a second: longer than
      // this caller waits. nextN fails with the 20 IDs it took.
      const short = createClient({ urls: limited.url, waitTimeoutMs: 300 });
      const err = await short.nextN("rl2", 25).then(
        () => assert.fail("no error"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof IdmintError && err.code === "unavailable" && !err.final, `${err}`);
      assert.deepEqual(err.ids, Array.from({ length: 20 }, (_, i) => BigInt(i + 1)));
      await short.close();

      const c = createClient({ urls: limited.url, waitTimeoutMs: 10_000 });
      // Ten-ID ranges at one grant a second (burst two): most loads are
      // refused rate_limited first, with a RetryInfo of 1 s.
      const ids = await take(c, "rl", 2, 25);
      assertUnique(ids.flat());
      const st = c.stats();
      const loads = st.tags[0]!.loads;
      assert.ok(st.requests > loads, `${st.requests} requests for ${loads} ranges: some were limited`);
      // The pause after a refusal is the RetryInfo's 1 s, not the 20 ms
      // backoff, which would have asked about six times a second.
      assert.ok(st.requests <= 2 * loads + 1, `${st.requests} requests for ${loads} ranges`);
      assert.equal(st.tags[0]!.recovered, 0);
      await c.close();
    } finally {
      await limited.stop();
    }
  });
});

describe("close", () => {
  test("gives back the unused tail: the next client starts right after the IDs used", async () => {
    const a = createClient({ urls: plain.url, token });
    const ids = await a.nextN("gb", 5);
    assert.deepEqual(ids, [1n, 2n, 3n, 4n, 5n]);
    await a.close();
    const st = a.stats().tags[0]!;
    assert.equal(st.givenBack, 95);
    assert.equal(st.abandoned, 0);
    await assert.rejects(a.next("gb"), (e: unknown) => e instanceof IdmintError && e.code === "closed");

    // Past the threshold: the next range was loaded too, and both go back.
    const b = createClient({ urls: plain.url, token });
    assert.equal(await b.next("gb"), 6n);
    for (let i = 0; i < 20; i++) await b.next("gb");
    const until = Date.now() + 10_000;
    while (b.stats().tags[0]!.next === undefined && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 10));
    }
    await b.close();
    assert.ok(b.stats().tags[0]!.givenBack > 100, `${b.stats().tags[0]!.givenBack} given back`);
    const c = createClient({ urls: plain.url, token });
    assert.equal(await c.next("gb"), 27n);
    await c.close();
  });

  test("hands out nothing once it has begun", async () => {
    const c = createClient({ urls: plain.url, token });
    const before = await c.nextN("gb", 3);
    const closing = c.close();
    await assert.rejects(c.next("gb"), (e: unknown) => e instanceof IdmintError && e.code === "closed");
    await assert.rejects(c.nextN("gb", 2), (e: unknown) => e instanceof IdmintError && e.code === "closed");
    await closing;
    const st = c.stats().tags[0]!;
    assert.equal(st.issued, 3);
    // Every ID of the range is handed out or given back.
    assert.equal(st.issued + st.givenBack + st.abandoned, st.step);
    const d = createClient({ urls: plain.url, token });
    assert.equal(await d.next("gb"), before[2]! + 1n);
    await d.close();
  });

  test("keeps the tail when the tag was granted more since (a gap, never a duplicate)", async () => {
    const a = createClient({ urls: plain.url, token });
    const b = createClient({ urls: plain.url, token });
    const x = await a.next("gb");
    const y = await b.next("gb");
    assert.ok(y > x);
    await a.close(); // b's range is above a's: a's tail stays a gap
    assert.equal(a.stats().tags[0]!.givenBack, 0);
    assert.ok(a.stats().tags[0]!.abandoned > 0);
    await b.close();
    assert.ok(b.stats().tags[0]!.givenBack > 0);
  });
});

describe("TLS", () => {
  test("with a CA and a client certificate, over HTTP/2 and HTTP/1.1", async () => {
    const certs = secure.certs!;
    for (const httpVersion of ["2", "1.1"] as const) {
      const c = createClient({
        urls: secure.url,
        token: secure.tokens["ids"],
        ca: `${certs}/ca.pem`,
        cert: `${certs}/client.pem`,
        key: `${certs}/client-key.pem`,
        httpVersion,
      });
      const ids = await take(c, "tls", 4, 50);
      assertUnique(ids.flat());
      await c.close();
      assert.ok(c.stats().tags[0]!.givenBack > 0);
    }
  });

  test("without the client certificate the server refuses the connection", async () => {
    const c = createClient({
      urls: secure.url,
      token: secure.tokens["ids"],
      ca: `${secure.certs}/ca.pem`,
      loadTimeoutMs: 300,
      retryMinMs: 10,
      retryMaxMs: 50,
    });
    const err = await c.next("tls").then(
      () => assert.fail("served without a client certificate"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof IdmintError);
    assert.equal(err.code, "unavailable");
    await c.close();
  });
});

describe("concurrency beyond one event loop", () => {
  test("worker threads, each with its own client, never share an ID", async () => {
    const script = `
      const { parentPort, workerData } = require("node:worker_threads");
      import(workerData.entry).then(async ({ createClient }) => {
        const c = createClient({ urls: workerData.url, token: workerData.token });
        const ids = [];
        await Promise.all(Array.from({ length: 8 }, async () => {
          for (let i = 0; i < 250; i++) ids.push((await c.next("workers")).toString());
        }));
        await c.close();
        parentPort.postMessage(ids);
      });`;
    const entry = new URL("../src/index.js", import.meta.url).href;
    const results = await Promise.all(
      Array.from(
        { length: 3 },
        () =>
          new Promise<string[]>((resolve, reject) => {
            const w = new Worker(script, { eval: true, workerData: { entry, url: plain.url, token } });
            w.once("message", resolve);
            w.once("error", reject);
          }),
      ),
    );
    const all = results.flat().map((s) => BigInt(s));
    assert.equal(all.length, 3 * 8 * 250);
    assertUnique(all);
  });
});

describe("the browser-safe entry", () => {
  test("serves over connect-web's fetch transports (Connect in JSON, gRPC-Web)", async () => {
    const seen: bigint[] = [];
    for (const make of [createWebTransport, createGrpcWebTransport]) {
      const c = createClientWithTransports({ transports: [{ url: plain.url, transport: make({ baseUrl: plain.url }) }], token });
      const ids = await take(c, "web", 4, 100);
      seen.push(...ids.flat());
      const err = await c.next("nope-web").then(
        () => assert.fail("no error"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof IdmintError && err.code === "unknown_tag" && err.final, `${err}`);
      await c.close();
      assert.ok(c.stats().tags.find((t) => t.tag === "web")!.givenBack > 0);
    }
    assertUnique(seen);
    // The second client started where the first gave back.
    assert.equal(seen.reduce((m, x) => (x > m ? x : m), 0n), 800n);
  });
});
