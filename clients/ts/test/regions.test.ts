// Regions against real processes: each region its own PostgreSQL database,
// claimed with `idmint region claim` (regions a and b, blocks of bStart
// IDs: a owns 1 to bStart, b the bStart after it) before its tag is made,
// and served by its own `idmint serve --region` processes, so that two
// regions granting the same ID can only be the client's doing.

import { strict as assert } from "node:assert";
import { after, before, describe, it } from "node:test";
import { createClient, IdmintError, isUnavailable, SharesOverlapError, type Client } from "../src/index.js";
import { Postgres } from "./postgres.js";
import { LossyProxy } from "./proxy.js";
import { run, Server } from "./server.js";

const tag = "order";
const bStart = 1_000_000_000_000_000n; // 10^15

const regionOf = (id: bigint): string => (id > bStart ? "b" : "a");

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function eventually(what: string, timeoutMs: number, cond: () => boolean, detail: () => string = () => ""): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > until) {
      assert.fail(`timed out after ${timeoutMs}ms waiting for ${what} ${detail()}`);
    }
    await sleep(20);
  }
}

/** TestRegion is one region: a claimed database and its serve processes. */
class TestRegion {
  servers: Server[] = [];
  private constructor(
    private readonly pg: Postgres,
    readonly name: string,
    readonly dbUrl: string,
    private ports: number[],
  ) {}

  static async claimed(pg: Postgres, name: string, regions: string, start: bigint, n: number): Promise<TestRegion> {
    const dbUrl = pg.database();
    run(["migrate", "--database-url", dbUrl]);
    run(["region", "claim", "--database-url", dbUrl, "--name", name, "--regions", regions, "--block", String(bStart)]);
    run(["tag", "create", tag, "--database-url", dbUrl, "--step", "100", "--max-step", "100", "--start", String(start)]);
    const r = new TestRegion(pg, name, dbUrl, Array.from({ length: n }, () => 0));
    await r.start();
    return r;
  }

  async start(): Promise<void> {
    this.servers = await Promise.all(
      this.ports.map((p) => Server.start({ tags: [], databaseUrl: this.dbUrl, region: this.name, port: p === 0 ? undefined : p })),
    );
    this.ports = this.servers.map((s) => s.port);
  }

  get urls(): string[] {
    return this.servers.map((s) => s.url);
  }

  async kill(): Promise<void> {
    await Promise.all(this.servers.map((s) => s.kill()));
  }

  /** maxID is the tag's max_id in the region's database. */
  maxID(): bigint {
    return BigInt(this.pg.query(this.dbUrl, `SELECT max_id FROM idmint_tags WHERE biz_tag = '${tag}'`)[0]![0]!);
  }

  /** segmentLog is the region's segment log of the tag: request ID → range. */
  segmentLog(): Map<string, [bigint, bigint]> {
    const rows = this.pg.query(this.dbUrl, `SELECT request_id::text, first_id, last_id FROM idmint_segments WHERE biz_tag = '${tag}'`);
    return new Map(rows.map(([id, f, l]) => [id!, [BigInt(f!), BigInt(l!)]]));
  }
}

/** Load is workers taking IDs from one client, each noted with its time. */
class Load {
  readonly ids: bigint[] = [];
  readonly at: number[] = [];
  readonly failures: unknown[] = [];
  duplicates = 0;
  private readonly seen = new Set<bigint>();
  private stopped = false;
  private readonly done: Promise<void>[];

  constructor(c: Client, workers: number) {
    this.done = Array.from({ length: workers }, async () => {
      while (!this.stopped) {
        try {
          const id = await c.next(tag);
          if (this.seen.has(id)) this.duplicates++;
          this.seen.add(id);
          this.ids.push(id);
          this.at.push(Date.now());
        } catch (e) {
          if (!this.stopped) this.failures.push(e);
        }
        await sleep(1);
      }
    });
  }

  firstFrom(name: string, since: number): number | undefined {
    for (let i = 0; i < this.ids.length; i++) {
      if (this.at[i]! >= since && regionOf(this.ids[i]!) === name) return this.at[i]!;
    }
    return undefined;
  }

  async halt(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.done);
  }

  sorted(): bigint[] {
    return [...this.ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  }
}

function regionsClient(a: string[], b: string[], extra: { httpVersion?: "1.1" } = {}): Client {
  return createClient({
    regions: [
      { name: "a", urls: a },
      { name: "b", urls: b },
    ],
    attemptTimeoutMs: 300,
    waitTimeoutMs: 1000,
    probeMinMs: 50,
    probeMaxMs: 500,
    ...extra,
  });
}

// waitServing waits until c serves from name and l handed out one of its
// IDs since since; it returns how long after since.
async function waitServing(c: Client, l: Load, name: string, since: number): Promise<number> {
  let at: number | undefined;
  await eventually(
    `the client to serve from region ${name}`,
    30_000,
    () => {
      at = l.firstFrom(name, since);
      return c.stats().region === name && at !== undefined;
    },
    () => JSON.stringify(c.stats(), (_, v) => (typeof v === "bigint" ? String(v) : v)),
  );
  return at! - since;
}

// inRanges reports whether id lies in one of ranges.
const inRanges = (ranges: Iterable<[bigint, bigint]>, id: bigint): boolean => {
  for (const [f, l] of ranges) if (f <= id && id <= l) return true;
  return false;
};

// assertNoCrossing: every ID handed out lies in a range of its region's
// segment log, and no request ID is in both logs.
function assertNoCrossing(ids: bigint[], a: TestRegion, b: TestRegion): void {
  const logs = { a: a.segmentLog(), b: b.segmentLog() };
  for (const id of logs.a.keys()) {
    assert.ok(!logs.b.has(id), `request ${id} is in both regions' segment logs: a request crossed a region`);
  }
  for (const [name, log] of Object.entries(logs)) {
    const ranges = [...log.values()];
    for (const id of ids) {
      if (regionOf(id) === name) {
        assert.ok(inRanges(ranges, id), `id ${id} (region ${name}'s share) is in no range of region ${name}'s segment log`);
      }
    }
  }
}

const show = (v: unknown) => JSON.stringify(v, (_, x) => (typeof x === "bigint" ? String(x) : x));

describe("regions", () => {
  let pg: Postgres;
  before(async () => {
    pg = await Postgres.start();
  });
  after(() => {});

  it("refuses a config of urls and regions, an unnamed region, a name twice, a region without urls", () => {
    const a = { name: "a", urls: ["http://127.0.0.1:1"] };
    const cases: [string, Parameters<typeof createClient>[0], string][] = [
      ["both", { urls: a.urls, regions: [a] }, "urls and regions are both set"],
      ["unnamed", { regions: [a, { name: "", urls: a.urls }] }, "region 1 has no name"],
      ["twice", { regions: [a, a] }, 'region "a" is named twice'],
      ["no urls", { regions: [a, { name: "b", urls: [] }] }, 'region "b" has no URLs'],
      ["bad url", { regions: [a, { name: "b", urls: ["ftp://x"] }] }, 'URL "ftp://x"'],
    ];
    for (const [name, opts, want] of cases) {
      assert.throws(() => createClient(opts), (e: unknown) => e instanceof IdmintError && e.message.includes(want), name);
    }
  });

  it("never moves on a refusal", async () => {
    const a = await Server.start({ tags: [{ name: "known" }] });
    const b = await Server.start({ tags: [{ name: "known" }] });
    const c = regionsClient([a.url], [b.url]);
    try {
      const err = await c.next("nope").catch((e: unknown) => e);
      assert.ok(err instanceof IdmintError && err.code === "unknown_tag" && err.final, `next: ${String(err)}`);
      const st = c.stats();
      assert.ok(st.region === "a" && st.failovers === 0, `region ${st.region}, failovers ${st.failovers}`);
    } finally {
      await c.close();
      await a.stop();
      await b.stop();
    }
  });

  it("fails over to b when home's processes die, and returns home when they are back", async () => {
    const a = await TestRegion.claimed(pg, "a", "a,b", 1n, 2);
    const b = await TestRegion.claimed(pg, "b", "a,b", bStart + 1n, 1);
    const c = regionsClient(a.urls, b.urls);
    const l = new Load(c, 4);
    try {
      await waitServing(c, l, "a", 0);
      await eventually("ids from a", 30_000, () => l.ids.length > 1000);
      const killed = Date.now();
      await a.kill();
      const failover = await waitServing(c, l, "b", killed);
      const restored = Date.now();
      await a.start();
      const back = await waitServing(c, l, "a", restored);
      await sleep(200);
      await l.halt();
      const st = c.stats();
      await c.close();

      assert.equal(l.duplicates, 0, "DUPLICATE ids");
      assert.equal(l.failures.length, 0, `${l.failures.length} calls failed, first: ${String(l.failures[0])}`);
      assert.ok(st.failovers >= 1 && st.returns >= 1, `failovers ${st.failovers}, returns ${st.returns}`);
      assertNoCrossing(l.sorted(), a, b);
      console.log(
        `failover: ${l.ids.length} ids, 0 duplicates, 0 failed calls; first id from b ${failover}ms after the kill (wait 1000ms); home again ${back}ms after its start; regions ${show(st.regions)}`,
      );
    } finally {
      await l.halt();
      await c.close().catch(() => {});
      await a.kill();
      await b.kill();
    }
  });

  it("gives up a request whose reply was lost in home when home dies: its range holds no id handed out", async () => {
    const a = await TestRegion.claimed(pg, "a", "a,b", 1n, 1);
    const b = await TestRegion.claimed(pg, "b", "a,b", bStart + 1n, 1);
    const proxy = await LossyProxy.start(a.servers[0]!.port);
    // HTTP/1.1: the proxy's replies are one request's each. Home's probe
    // goes through the proxy too: it fails while the replies are lost.
    const c = regionsClient([proxy.url], b.urls, { httpVersion: "1.1" });
    const l = new Load(c, 2);
    try {
      await waitServing(c, l, "a", 0);
      await eventually("ids from a", 30_000, () => l.ids.length > 500);
      proxy.loseAll(true);
      const cut = Date.now();
      const failover = await waitServing(c, l, "b", cut);
      const lost = new Set(proxy.lostIds);
      await a.kill();
      const restored = Date.now();
      await a.start();
      proxy.loseAll(false);
      const back = await waitServing(c, l, "a", restored);
      await l.halt();
      const st = c.stats();
      await c.close();

      assert.equal(l.duplicates, 0, "DUPLICATE ids");
      const ids = l.sorted();
      assertNoCrossing(ids, a, b);
      const log = a.segmentLog();
      let committed = 0;
      for (const id of lost) {
        const rg = log.get(id);
        if (rg === undefined) continue;
        committed++;
        const served = ids.find((x) => rg[0] <= x && x <= rg[1]);
        assert.equal(served, undefined, `request ${id}: its reply was lost in a, which was then left; yet id ${served} of its range [${rg[0]}, ${rg[1]}] was handed out`);
      }
      assert.ok(committed > 0, `none of the ${lost.size} requests whose reply was lost committed in a: the test proved nothing`);
      assert.ok(st.regions[0]!.abandoned >= 1, `region a: ${st.regions[0]!.abandoned} requests abandoned, want at least 1 (${show(st.regions)})`);
      console.log(
        `lost reply: ${ids.length} ids, 0 duplicates; ${lost.size} requests lost their reply in a (${committed} committed there, none served); first id from b ${failover}ms after the cut; home again ${back}ms after its restart; regions ${show(st.regions)}`,
      );
    } finally {
      await l.halt();
      await c.close().catch(() => {});
      await proxy.close();
      await a.kill();
      await b.kill();
    }
  });

  it("gives each range back to the region that granted it; a down region's tails are a gap", async () => {
    const a = await TestRegion.claimed(pg, "a", "a,b", 1n, 1);
    const b = await TestRegion.claimed(pg, "b", "a,b", bStart + 1n, 1);
    // A second tag, served once from home: its range is in home's buffer
    // when the client leaves home, a gap that cannot go back.
    run(["tag", "create", "user", "--database-url", a.dbUrl, "--step", "100", "--max-step", "100"]);
    const c = regionsClient(a.urls, b.urls);
    const l = new Load(c, 1);
    try {
      await c.next("user");
      await waitServing(c, l, "a", 0);
      await a.kill();
      await waitServing(c, l, "b", Date.now());
      await a.start();
      await waitServing(c, l, "a", Date.now());
      await l.halt();
      await c.close();
      const st = c.stats();
      const highest: Record<string, bigint> = { a: 0n, b: 0n };
      for (const id of l.ids) {
        if (id > highest[regionOf(id)]!) highest[regionOf(id)] = id;
      }
      for (const r of [a, b]) {
        assert.equal(r.maxID(), highest[r.name], `region ${r.name}: max_id is not the highest id handed out from it: its tails did not all go back to it`);
      }
      assert.ok(st.regions[0]!.gap >= 99, `region a: gap ${st.regions[0]!.gap}, want at least the 99 ids of tag user left in its buffer when the client left a (${show(st.regions)})`);
      console.log(`give-back: max_id a ${a.maxID()}, b ${b.maxID()}, the highest ids handed out from each; regions ${show(st.regions)}`);
    } finally {
      await l.halt();
      await c.close().catch(() => {});
      await a.kill();
      await b.kill();
    }
  });

  it("refuses every call with SharesOverlapError once b's share overlaps a's", async () => {
    const a = await TestRegion.claimed(pg, "a", "a,b", 1n, 1);
    const b = await TestRegion.claimed(pg, "b", "b,a", 1n, 1); // b owns a's blocks
    const c = regionsClient(a.urls, b.urls);
    const seen = new Set<bigint>();
    const take = async (): Promise<unknown> => {
      try {
        const id = await c.next(tag);
        assert.ok(!seen.has(id), `DUPLICATE id ${id}`);
        seen.add(id);
        return undefined;
      } catch (e) {
        return e;
      }
    };
    try {
      for (let i = 0; i < 250; i++) {
        const err = await take();
        assert.equal(err, undefined, String(err));
      }
      await a.kill();
      let err: unknown;
      const deadline = Date.now() + 20_000;
      while (err === undefined && Date.now() < deadline) {
        err = await take();
      }
      assert.ok(err instanceof SharesOverlapError && !isUnavailable(err), `after a's death, next: ${String(err)}; want SharesOverlapError alone`);
      await a.start();
      await sleep(1000); // several probes' worth (50 to 500 ms)
      const begin = Date.now();
      const again = await take();
      assert.ok(again instanceof SharesOverlapError, `with a back, next: ${String(again)}; want SharesOverlapError still`);
      assert.ok(Date.now() - begin < 100, "a refusal took long: it is known, it needs no request");
      const n = await c.nextN(tag, 3).catch((e: unknown) => e);
      assert.ok(n instanceof SharesOverlapError, `nextN: ${String(n)}`);
      const st = c.stats();
      assert.ok(st.conflict !== undefined && st.returns === 0, `stats: conflict ${st.conflict}, returns ${st.returns}`);

      const logA = a.segmentLog();
      const logB = b.segmentLog();
      let overlapping = 0;
      for (const id of seen) {
        assert.ok(inRanges(logA.values(), id), `id ${id} handed out is in none of a's ranges`);
        if (inRanges(logB.values(), id)) overlapping++;
      }
      assert.ok(logB.size > 0 && overlapping > 0, `negative control: b granted ${show([...logB.values()])}, holding ${overlapping} of the ${seen.size} ids handed out from a`);
      console.log(`overlap: ${seen.size} ids handed out, all a's, 0 duplicates; b's refused ranges ${show([...logB.values()])} hold ${overlapping} of them; refused with: ${(err as Error).message}`);
    } finally {
      await c.close().catch(() => {});
      await a.kill();
      await b.kill();
    }
  });
});
