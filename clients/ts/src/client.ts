// Client: many tags' double buffers over one set of instances. Nothing
// here is Node's own: index.ts makes the Node transports, web.ts takes a
// browser's.

import { TagBuffer, type BufferConfig, type Logger, type TagStats } from "./buffer.js";
import { ClientCode, IdmintError } from "./errors.js";
import { Granter, type Endpoint } from "./granter.js";

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
  /** Receives warnings (recovered ranges, abandoned IDs, failed loads); default none. */
  logger?: Logger;
}

/** A snapshot of a client. */
export interface Stats {
  /** Each tag's buffer, sorted by tag. */
  tags: TagStats[];
  /** Range requests sent to instances, retries included. */
  requests: number;
}

// A tag name as idmint takes it: 1-64 of A-Za-z0-9_.:-, starting with a
// letter or digit.
const tagPattern = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$/;

// Tags the instances do not know, remembered at most this many.
const maxUnknown = 10_000;

/**
 * Client hands out the IDs of many tags from ranges idmint instances grant
 * it, each range asked for exactly once (request ID and holder key chosen
 * before the first attempt, sent again on every retry, to any instance).
 * Safe for any number of concurrent callers in one event loop; each worker
 * thread makes its own.
 */
export class Client {
  private readonly buffers = new Map<string, TagBuffer>();
  // Tags found unknown, answered from memory until the time kept.
  private readonly unknown = new Map<string, { until: number; err: IdmintError }>();
  private readonly granter: Granter;
  private readonly cfg: BufferConfig;
  private readonly closeTimeoutMs: number;
  private closing: Promise<void> | undefined;

  constructor(
    endpoints: Endpoint[],
    private readonly opts: Options,
    private readonly release: () => void = () => {},
  ) {
    if (endpoints.length === 0) {
      throw new IdmintError(ClientCode.BadArgument, "idmint client: no instance URLs");
    }
    const waitTimeoutMs = opts.waitTimeoutMs ?? 2000;
    const attemptTimeoutMs = opts.attemptTimeoutMs ?? waitTimeoutMs / 2;
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
    this.granter = new Granter(endpoints, opts.token, attemptTimeoutMs);
  }

  /**
   * next returns the next ID of tag. In steady state it takes it from
   * memory; it waits only when both of the tag's ranges are empty.
   * Rejects with an IdmintError: `final` for a refusal (an unknown tag, the
   * token, its scopes), else code "unavailable", worth a retry later.
   */
  async next(tag: string): Promise<bigint> {
    const b = this.buffers.get(tag);
    const id = b?.tryTake();
    if (id !== undefined) {
      return id;
    }
    const r = await this.buffer(tag).take(1);
    return r.first;
  }

  /**
   * nextN returns n IDs of tag, increasing. On error the IDs taken before
   * it are on the error's `ids` (unique like any other; a caller that needs
   * all or nothing drops them: a gap, never a duplicate).
   */
  async nextN(tag: string, n: number): Promise<bigint[]> {
    if (!Number.isSafeInteger(n) || n < 1) {
      throw new IdmintError(ClientCode.BadArgument, `count ${n}: must be a whole number of at least 1`, { tag });
    }
    const ids: bigint[] = [];
    try {
      while (ids.length < n) {
        const b = this.buffer(tag);
        const r = b.tryTakeN(n - ids.length) ?? (await b.take(n - ids.length));
        for (let id = r.first; id <= r.last; id++) {
          ids.push(id);
        }
      }
    } catch (e) {
      if (e instanceof IdmintError) {
        e.ids = ids;
      }
      throw e;
    }
    return ids;
  }

  /** ready loads the first range of each tag given (default: options.tags). */
  async ready(tags: string[] = this.opts.tags ?? []): Promise<void> {
    await Promise.all(
      tags.map(async (tag) => {
        const b = this.buffer(tag);
        if (!b.loadedOnce) {
          // A take of one would use an ID: wait for the load by taking
          // none, through nextN's path, without handing anything out.
          await b.take(0);
        }
      }),
    );
  }

  // buffer returns tag's buffer, made on first use; it throws for an
  // invalid tag, a closed client, or a tag found unknown a moment ago.
  private buffer(tag: string): TagBuffer {
    const b = this.buffers.get(tag);
    if (b !== undefined) {
      return b;
    }
    if (this.closing !== undefined) {
      throw new IdmintError(ClientCode.Closed, "idmint client closed", { tag });
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
    const nb = new TagBuffer(tag, this.granter, this.cfg);
    this.buffers.set(tag, nb);
    nb.onRefused = (err) => this.refused(tag, nb, err);
    return nb;
  }

  // refused drops the buffer of a tag refused before it ever had a range
  // (an unknown tag, a token without its scope), so that made-up names
  // leave nothing behind; an unknown tag is answered from memory a while.
  private refused(tag: string, b: TagBuffer, err: IdmintError): void {
    if (b.loadedOnce || b.holdsRequests || this.buffers.get(tag) !== b) {
      return;
    }
    this.buffers.delete(tag);
    if (err.code === "unknown_tag" && this.unknown.size < maxUnknown) {
      this.unknown.set(tag, { until: Date.now() + this.cfg.unknownTtlMs, err });
    }
  }

  /** stats returns a snapshot of every tag's buffer. */
  stats(): Stats {
    const tags = [...this.buffers.values()].map((b) => b.stats()).sort((a, b) => (a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0));
    return { tags, requests: this.granter.requests };
  }

  /**
   * close stops the loads and gives back, for each tag, the unused IDs of
   * its newest ranges (when nothing was granted above them since); the
   * rest is a gap. It then closes the connections. next() rejects with
   * code "closed" afterwards. Calling it again returns the same promise.
   */
  close(): Promise<void> {
    if (this.closing === undefined) {
      const deadline = Date.now() + this.closeTimeoutMs;
      const bufs = [...this.buffers.values()];
      this.closing = Promise.all(bufs.map((b) => b.close(deadline))).then(
        () => this.release(),
        (e: unknown) => {
          this.release();
          throw e;
        },
      );
    }
    return this.closing;
  }
}
