// Client: many tags' double buffers over one set of instances, or over
// several regions served one at a time. Nothing here is Node's own:
// index.ts makes the Node transports, web.ts takes a browser's.

import { TagBuffer, type BufferConfig, type Logger, type TagStats } from "./buffer.js";
import { ClientCode, IdmintError, SharesOverlapError } from "./errors.js";
import type { Endpoint, Grant } from "./granter.js";
import { Region, Shares, Stint, type RegionEndpoints, type RegionStats } from "./region.js";

/** Settings of a client; every field but the instances has a default. */
export interface Options {
  /**
   * Bearer token sent with every request, for instances serving with
   * --auth token (scope ids or ids:TAG). Never logged nor put in an error.
   */
  token?: string;
  /** Tags whose first range is loaded by ready() (createClient does not wait). */
  tags?: string[];
  /** Target life of one range, which sizes the next (default 15 minutes). */
  periodMs?: number;
  /** Used share of the current range that starts the next one's load (default 0.1). */
  threshold?: number;
  /** Longest a caller waits when both ranges are empty (default 2000). */
  waitTimeoutMs?: number;
  /** Longest one load retries, across instances (default 10000). */
  loadTimeoutMs?: number;
  /** Longest one request to one instance (default half of waitTimeoutMs). */
  attemptTimeoutMs?: number;
  /** Bounds of the pause between rounds of a load, with full jitter (defaults 20 and 1000). */
  retryMinMs?: number;
  retryMaxMs?: number;
  /** Bounds of the backoff after a failed load, while callers fail fast (defaults 100 and 5000). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Longest close() waits for a load in flight before it aborts it (default 2000). */
  closeWaitMs?: number;
  /** Longest close() spends in all, give-backs included (default 5000). */
  closeTimeoutMs?: number;
  /**
   * Bounds of the pause between two probes of home while the client serves
   * from another region (defaults 250 and 10000), doubled after each probe
   * that fails, with jitter.
   */
  probeMinMs?: number;
  probeMaxMs?: number;
  /** Receives warnings (recovered ranges, abandoned IDs, failed loads, moves between regions); default none. */
  logger?: Logger;
}

/** A snapshot of a client. */
export interface Stats {
  /** Each tag's buffer in the region served from now, sorted by tag. */
  tags: TagStats[];
  /** Range requests sent to instances, retries included. */
  requests: number;
  /** The region served from now ("" for a list of URLs). */
  region: string;
  /** Moves away from a region that could not grant; moves back home. */
  failovers: number;
  returns: number;
  /** Each region's counters, home first. */
  regions: RegionStats[];
  /** The conflict between the regions' shares, when one was seen. */
  conflict: string | undefined;
}

/**
 * live reports whether an instance at url answers GET /id/live (its
 * process up) within timeoutMs; the default uses fetch.
 */
export type LiveProbe = (url: string, timeoutMs: number) => Promise<boolean>;

// A tag name as idmint takes it: 1-64 of A-Za-z0-9_.:-, starting with a
// letter or digit.
const tagPattern = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;

// Tags the instances do not know, remembered at most this many.
const maxUnknown = 10_000;

// pathLive answers 200 while an instance's process is up.
const pathLive = "/id/live";

const fetchLive: LiveProbe = async (url, timeoutMs) => {
  try {
    const r = await fetch(url + pathLive, { signal: AbortSignal.timeout(timeoutMs) });
    await r.body?.cancel();
    return r.status === 200;
  } catch {
    return false;
  }
};

/** checkRegions refuses a region without a name or instances, and a name given twice. */
export function checkRegions(regions: { name: string; count: number }[]): void {
  const seen = new Set<string>();
  regions.forEach((r, i) => {
    if (r.name === "") {
      throw new IdmintError(ClientCode.BadArgument, `idmint client: region ${i} has no name`);
    }
    if (seen.has(r.name)) {
      throw new IdmintError(ClientCode.BadArgument, `idmint client: region ${JSON.stringify(r.name)} is named twice`);
    }
    if (r.count === 0) {
      throw new IdmintError(ClientCode.BadArgument, `idmint client: region ${JSON.stringify(r.name)} has no URLs`);
    }
    seen.add(r.name);
  });
}

/**
 * Client hands out the IDs of many tags from ranges idmint instances grant
 * it, each range asked for exactly once (request ID and holder key chosen
 * before the first attempt, sent again on every retry, to any instance of
 * one region). Safe for any number of concurrent callers in one event loop;
 * each worker thread makes its own.
 *
 * With several regions (home first) it serves from one at a time, moves to
 * the next when the one it serves cannot grant within the wait, probes
 * home meanwhile and returns once home grants again; every range is checked
 * against the shares the other regions sent (SharesOverlapError).
 */
export class Client {
  // Tags found unknown, answered from memory until the time kept.
  private readonly unknown = new Map<string, { until: number; err: IdmintError }>();
  private readonly regions: Region[];
  private readonly shares: Shares;
  private readonly cfg: BufferConfig;
  private readonly closeTimeoutMs: number;
  private readonly attemptTimeoutMs: number;
  private readonly probeMinMs: number;
  private readonly probeMaxMs: number;
  private readonly counter = { requests: 0 };
  // The stint served from now; every stint not yet closed (a probe's
  // included), and the closes under way.
  private serving: Stint;
  private readonly open = new Set<Stint>();
  private readonly closes = new Set<Promise<void>>();
  private failovers = 0;
  private returns = 0;
  private probeTimer: ReturnType<typeof setTimeout> | undefined;
  private probing = false;
  private closing: Promise<void> | undefined;

  /**
   * endpoints is one list of instances (one unnamed region, no share
   * check) or the regions, home first.
   */
  constructor(
    endpoints: Endpoint[] | RegionEndpoints[],
    private readonly opts: Options,
    private readonly release: () => void = () => {},
    private readonly live: LiveProbe = fetchLive,
  ) {
    const list: RegionEndpoints[] =
      endpoints.length > 0 && "endpoints" in endpoints[0]! ? (endpoints as RegionEndpoints[]) : [{ name: "", endpoints: endpoints as Endpoint[] }];
    if (list.length > 1 || list[0]!.name !== "") {
      checkRegions(list.map((r) => ({ name: r.name, count: r.endpoints.length })));
    }
    if (list.length === 0 || list[0]!.endpoints.length === 0) {
      throw new IdmintError(ClientCode.BadArgument, "idmint client: no instance URLs");
    }
    const waitTimeoutMs = opts.waitTimeoutMs ?? 2000;
    this.attemptTimeoutMs = opts.attemptTimeoutMs ?? waitTimeoutMs / 2;
    this.cfg = {
      periodMs: opts.periodMs ?? 15 * 60_000,
      threshold: opts.threshold !== undefined && opts.threshold > 0 && opts.threshold < 1 ? opts.threshold : 0.1,
      waitTimeoutMs,
      loadTimeoutMs: opts.loadTimeoutMs ?? 10_000,
      retryMinMs: opts.retryMinMs ?? 20,
      retryMaxMs: Math.max(opts.retryMaxMs ?? 1000, opts.retryMinMs ?? 20),
      minBackoffMs: opts.minBackoffMs ?? 100,
      maxBackoffMs: Math.max(opts.maxBackoffMs ?? 5000, opts.minBackoffMs ?? 100),
      closeWaitMs: opts.closeWaitMs ?? 2000,
      unknownTtlMs: 5000,
      logger: opts.logger,
    };
    this.closeTimeoutMs = opts.closeTimeoutMs ?? 5000;
    this.probeMinMs = opts.probeMinMs ?? 250;
    this.probeMaxMs = Math.max(opts.probeMaxMs ?? 10_000, this.probeMinMs);
    this.regions = list.map((r, i) => new Region(r.name, i, r.endpoints));
    this.shares = new Shares(this.regions);
    this.serving = this.newStint(this.regions[0]!);
  }

  private get multi(): boolean {
    return this.regions.length > 1;
  }

  /**
   * next returns the next ID of tag. In steady state it takes it from
   * memory; it waits only when both of the tag's ranges are empty.
   * Rejects with an IdmintError: `final` for a refusal (an unknown tag, the
   * token, its scopes) or a SharesOverlapError, else code "unavailable",
   * worth a retry later.
   */
  async next(tag: string): Promise<bigint> {
    if (this.shares.conflict !== undefined) {
      throw this.shares.conflict;
    }
    const id = this.serving.buffers.get(tag)?.tryTake();
    if (id !== undefined) {
      return id;
    }
    const r = await this.inRegions(tag, (b) => b.take(1));
    return r.first;
  }

  /**
   * nextN returns n IDs of tag, increasing. On error the IDs taken before
   * it are on the error's `ids` (unique like any other; a caller that needs
   * all or nothing drops them: a gap, never a duplicate). A region that
   * fails after handing out some of the n leaves them with the error: two
   * regions' IDs are not in order.
   */
  async nextN(tag: string, n: number): Promise<bigint[]> {
    if (!Number.isSafeInteger(n) || n < 1) {
      throw new IdmintError(ClientCode.BadArgument, `count ${n}: must be a whole number of at least 1`, { tag });
    }
    const ids: bigint[] = [];
    const push = (r: { first: bigint; last: bigint }) => {
      for (let id = r.first; id <= r.last; id++) {
        ids.push(id);
      }
    };
    let st: Stint | undefined;
    try {
      await this.inRegions(tag, async (b, s) => {
        push(b.tryTakeN(n) ?? (await b.take(n)));
        st = s;
      });
      while (ids.length < n) {
        if (this.shares.conflict !== undefined) {
          throw this.shares.conflict;
        }
        const b = this.buffer(st!, tag);
        push(b.tryTakeN(n - ids.length) ?? (await b.take(n - ids.length)));
      }
    } catch (e) {
      const err = this.callerError(e);
      // The conflict is one error for every call: it carries no call's IDs
      // (those taken before it are a gap).
      if (err instanceof IdmintError && !(err instanceof SharesOverlapError)) {
        err.ids = ids;
      }
      throw err;
    }
    return ids;
  }

  /** ready loads the first range of each tag given (default: options.tags). */
  async ready(tags: string[] = this.opts.tags ?? []): Promise<void> {
    await Promise.all(
      tags.map((tag) =>
        // A take of one would use an ID: wait for the load by taking none,
        // through nextN's path, without handing anything out.
        this.inRegions(tag, async (b) => {
          if (!b.loadedOnce) {
            await b.take(0);
          }
        }),
      ),
    );
  }

  // inRegions runs f on tag's buffer in the stint serving, and again in the
  // next region's when the client moves (at most once per region).
  private async inRegions<T>(tag: string, f: (b: TagBuffer, st: Stint) => Promise<T>): Promise<T> {
    let err: unknown;
    for (let i = 0; i < this.regions.length; i++) {
      const st = this.serving;
      try {
        return await f(this.buffer(st, tag), st);
      } catch (e) {
        err = e;
        if (!this.failOver(st, e)) {
          break;
        }
      }
    }
    throw this.callerError(err);
  }

  // failOver reports whether a caller whose take on st failed with err
  // tries again in the stint serving now: when the client left st
  // meanwhile, or when err says st's region could not grant within the
  // wait (not a refusal), which makes the client leave it.
  private failOver(st: Stint, err: unknown): boolean {
    if (!this.multi || this.closing !== undefined || this.shares.conflict !== undefined || !(err instanceof IdmintError)) {
      return false;
    }
    if (st !== this.serving) {
      return true;
    }
    if (err.final) {
      return false;
    }
    this.leave(st, err);
    return true;
  }

  // callerError is err as the caller sees it: the shares' conflict once
  // there is one, whatever the take failed with.
  private callerError(err: unknown): unknown {
    return this.shares.conflict ?? err;
  }

  // cannotGrant is told when one request of st reached every instance of
  // its region and none answered with a range or a refusal: when tag's
  // buffer there has nothing to hand out, the client leaves the region.
  private cannotGrant(st: Stint, tag: string, err: IdmintError): void {
    if (!this.multi || st.down || st !== this.serving) {
      return;
    }
    if (st.buffers.get(tag)?.empty ?? true) {
      this.leave(st, err);
    }
  }

  // leave moves the client from st, which could not grant, to the next
  // region in order of preference; st is closed as down: nothing more is
  // sent to its region under it.
  private leave(st: Stint, why: IdmintError): void {
    if (this.closing !== undefined || this.serving !== st || this.shares.conflict !== undefined) {
      return;
    }
    const next = this.regions[(st.region.index + 1) % this.regions.length]!;
    st.down = true;
    st.region.left++;
    this.failovers++;
    this.warn("MOVED to another region: this one could not grant within the wait; its unsettled requests are given up (gaps if they committed), never sent elsewhere", {
      from: st.region.name,
      to: next.name,
      err: why.message,
    });
    this.switchTo(this.newStint(next));
    if (next.index !== 0) {
      this.startProbing();
    }
  }

  // switchTo makes st the stint serving and closes the one before: its
  // waiting callers go on to st (inRegions).
  private switchTo(st: Stint): void {
    const old = this.serving;
    this.serving = st;
    this.closeStint(old, new IdmintError(ClientCode.Unavailable, `idmint client left region ${JSON.stringify(old.region.name)}`, { disposition: "retry" }));
  }

  private closeStint(st: Stint, waiterError?: IdmintError): Promise<void> {
    const p = st.close(Date.now() + Math.min(this.closeTimeoutMs, 2 * this.attemptTimeoutMs + this.cfg.closeWaitMs), waiterError).finally(() => {
      this.open.delete(st);
      this.closes.delete(p);
    });
    this.closes.add(p);
    return p;
  }

  private newStint(r: Region): Stint {
    const st = new Stint(r, this.opts.token, this.attemptTimeoutMs, this.counter);
    st.granter.onEveryInstanceFailed = (tag, err) => this.cannotGrant(st, tag, err);
    this.open.add(st);
    return st;
  }

  // startProbing probes home while the client serves from another region,
  // with backoff from probeMinMs to probeMaxMs (jittered), until it returns.
  private startProbing(): void {
    if (this.probing) {
      return;
    }
    this.probing = true;
    let pause = this.probeMinMs;
    const tick = async () => {
      this.probeTimer = undefined;
      if (await this.tryReturn()) {
        this.probing = false;
        return;
      }
      pause = Math.min(2 * pause, this.probeMaxMs);
      schedule();
    };
    const schedule = () => {
      this.probeTimer = setTimeout(() => void tick(), pause / 2 + Math.random() * (pause / 2));
    };
    schedule();
  }

  // tryReturn makes one probe of home: when an instance is live, it loads
  // the first range of every tag in use in a new stint at home, and moves
  // there once each has one (the stint left is closed normally, its tails
  // given back to its own region). It reports whether the probing is over.
  private async tryReturn(): Promise<boolean> {
    const home = this.regions[0]!;
    if (this.closing !== undefined || this.shares.conflict !== undefined || this.serving.region === home) {
      return true;
    }
    let live = false;
    for (const e of home.endpoints) {
      if (await this.live(e.url, this.attemptTimeoutMs)) {
        live = true;
        break;
      }
    }
    if (!live || this.closing !== undefined) {
      return this.closing !== undefined;
    }
    const st = this.newStint(home);
    const tags = [...this.serving.buffers.values()].filter((b) => b.loadedOnce).map((b) => b.tag);
    let ready = true;
    for (const tag of tags) {
      try {
        await this.buffer(st, tag).take(0);
      } catch (e) {
        this.warn("home region live but not granting yet", { region: home.name, biz_tag: tag, err: (e as Error).message });
        ready = false;
        break;
      }
    }
    if (this.closing !== undefined || this.shares.conflict !== undefined || this.serving.region === home) {
      void this.closeStint(st);
      return true;
    }
    if (!ready) {
      void this.closeStint(st);
      return false;
    }
    const from = this.serving.region.name;
    this.switchTo(st);
    this.returns++;
    this.warn("RETURNED to the home region: it grants again", { from, to: home.name });
    return true;
  }

  // check is every buffer's check of a grant of r's (several regions): on
  // a conflict between the shares the client hands out nothing more.
  private check(r: Region, g: Grant): SharesOverlapError | undefined {
    const hadConflict = this.shares.conflict !== undefined;
    const err = this.shares.check(r, g.first, g.last, g.share);
    if (err !== undefined && !hadConflict) {
      this.refuseAll(err);
    }
    return err;
  }

  // refuseAll makes the client hand out nothing more once its regions'
  // shares conflict: the stint serving is closed (its tails given back to
  // its own region), its waiting callers get the conflict, and so does
  // every call from then on.
  private refuseAll(err: SharesOverlapError): void {
    this.warn("REFUSING every call: two regions' shares may overlap; no id is handed out until the shares are fixed and the client is made again", { err: err.message });
    for (const st of this.open) {
      void this.closeStint(st, err);
    }
  }

  // buffer returns tag's buffer in st, made on first use; it throws for an
  // invalid tag, a closed client, a conflict, or a tag found unknown a
  // moment ago.
  private buffer(st: Stint, tag: string): TagBuffer {
    if (this.shares.conflict !== undefined) {
      throw this.shares.conflict;
    }
    const b = st.buffers.get(tag);
    if (b !== undefined) {
      return b;
    }
    if (this.closing !== undefined) {
      throw new IdmintError(ClientCode.Closed, "idmint client closed", { tag });
    }
    if (st.closed) {
      throw new IdmintError(ClientCode.Unavailable, `idmint client left region ${JSON.stringify(st.region.name)}`, { tag, disposition: "retry" });
    }
    if (!tagPattern.test(tag)) {
      throw new IdmintError("invalid_biz_tag", `invalid biz_tag ${JSON.stringify(tag.slice(0, 80))}: want 1-64 of [A-Za-z0-9_.:-], starting with a letter or digit`, { tag });
    }
    const u = this.unknown.get(tag);
    if (u !== undefined) {
      if (Date.now() < u.until) {
        throw u.err;
      }
      this.unknown.delete(tag);
    }
    const nb = st.newBuffer(tag, this.cfg, this.multi ? (g) => this.check(st.region, g) : undefined);
    nb.onRefused = (err) => this.refused(st, tag, nb, err);
    return nb;
  }

  // refused drops the buffer of a tag refused before it ever had a range
  // (an unknown tag, a token without its scope), so that made-up names
  // leave nothing behind; an unknown tag is answered from memory a while.
  private refused(st: Stint, tag: string, b: TagBuffer, err: IdmintError): void {
    if (b.loadedOnce || b.holdsRequests || st.buffers.get(tag) !== b) {
      return;
    }
    st.buffers.delete(tag);
    if (err.code === "unknown_tag" && this.unknown.size < maxUnknown) {
      this.unknown.set(tag, { until: Date.now() + this.cfg.unknownTtlMs, err });
    }
  }

  /** stats returns a snapshot of every tag's buffer and of the regions. */
  stats(): Stats {
    const st = this.serving;
    const tags = [...st.buffers.values()].map((b) => b.stats()).sort((a, b) => (a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0));
    return {
      tags,
      requests: this.counter.requests,
      region: st.region.name,
      failovers: this.failovers,
      returns: this.returns,
      regions: this.regions.map((r) => ({ name: r.name, serving: r === st.region, left: r.left, abandoned: r.abandoned, gap: r.gap })),
      conflict: this.shares.conflict?.message,
    };
  }

  /**
   * close stops the loads and gives back, for each tag, the unused IDs of
   * its newest ranges (when nothing was granted above them since), each to
   * the region that granted it; the rest is a gap. It then closes the
   * connections. next() rejects with code "closed" afterwards. Calling it
   * again returns the same promise.
   */
  close(): Promise<void> {
    if (this.closing === undefined) {
      if (this.probeTimer !== undefined) {
        clearTimeout(this.probeTimer);
      }
      const deadline = Date.now() + this.closeTimeoutMs;
      const all = [...this.open].map((st) => st.close(deadline));
      this.closing = Promise.all([...all, ...this.closes]).then(
        () => this.release(),
        (e: unknown) => {
          this.release();
          throw e;
        },
      );
    }
    return this.closing;
  }

  private warn(message: string, fields: Record<string, unknown>): void {
    this.cfg.logger?.warn(message, fields);
  }
}
