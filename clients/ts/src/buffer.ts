// One tag's double buffer, as idmint's segment package keeps it: the range
// being served and the next one, fetched in the background once a share of
// the current one is used, each fetched exactly once by request ID.
//
// JavaScript runs one callback at a time, so a take is plain code between
// two awaits: no two callers of one event loop can take the same ID. What
// needs care is across awaits: a load in flight, callers waiting for it,
// and close.

import { ClientCode, IdmintError } from "./errors.js";
import { type Grant, type Granter, type Range, type Request } from "./granter.js";
import { holderKey, uuidv7 } from "./ids.js";
import { nextStep } from "./step.js";

/** Receives the client's warnings (never a holder key or a token). */
export interface Logger {
  warn(message: string, fields?: Record<string, unknown>): void;
}

/** The settings every tag's buffer uses; Client fills them in. */
export interface BufferConfig {
  periodMs: number;
  threshold: number;
  waitTimeoutMs: number;
  loadTimeoutMs: number;
  retryMinMs: number;
  retryMaxMs: number;
  minBackoffMs: number;
  maxBackoffMs: number;
  closeWaitMs: number;
  unknownTtlMs: number;
  logger: Logger | undefined;
}

/** A snapshot of one tag's buffer. */
export interface TagStats {
  tag: string;
  /** The range being served and the next one, if any. */
  current: Range | undefined;
  next: Range | undefined;
  /** Ranges granted; of those, recovered after a lost reply. */
  loads: number;
  recovered: number;
  /** Loads that failed; ranges refused as a rollback. */
  failures: number;
  refused: number;
  /** IDs handed out, given back at close, and abandoned (a gap). */
  issued: number;
  givenBack: number;
  abandoned: number;
  /** The highest ID granted here (the floor of the next requests). */
  floor: bigint;
  /** The size of the last range. */
  step: number;
}

// A range being served: next is the next ID to hand out.
class Span {
  next: bigint;
  readonly prefetchAt: bigint;
  constructor(
    readonly first: bigint,
    readonly last: bigint,
    readonly req: Request,
    threshold: number,
  ) {
    this.next = first;
    const len = Number(last - first + 1n);
    this.prefetchAt = first + BigInt(Math.max(Math.ceil(len * threshold) - 1, 0));
  }
  left(): bigint {
    return this.next > this.last ? 0n : this.last - this.next + 1n;
  }
  /** Takes up to n consecutive IDs; undefined when used up. */
  take(n: number): Range | undefined {
    if (this.next > this.last) {
      return undefined;
    }
    const first = this.next;
    let last = first + BigInt(n) - 1n;
    if (last > this.last) {
      last = this.last;
    }
    this.next = last + 1n;
    return { first, last };
  }
}

// A caller queued for IDs from the ranges that arrive, first come first.
interface Waiter {
  n: number;
  resolve(r: Range): void;
  reject(e: IdmintError): void;
  timer: ReturnType<typeof setTimeout>;
}

/**
 * What a buffer's client adds to it: the floor it starts from (its
 * region's, kept across stints), a check of every grant before it is
 * served (the regions' shares), and the region's floor raised with it.
 */
export interface BufferHooks {
  /** The highest ID the region granted the tag before (0n: none). */
  floor?: bigint;
  /** check returns an error to refuse g (a gap), undefined to serve it. */
  check?(g: Grant): IdmintError | undefined;
  /** raised is told the last ID of every range the region granted. */
  raised?(last: bigint): void;
}

/** How close ends a buffer. */
export interface CloseMode {
  /**
   * down: its region could not grant and was left: nothing more is sent
   * to it (no give-back, no lookup of an unsettled request); what it held
   * and any unsettled request are given up (gaps).
   */
  down?: boolean;
  /** The error callers waiting get (default: "closed"). */
  waiterError?: IdmintError;
}

// Unsettled requests kept per tag (a load that gave up, maybe granted).
const maxPending = 8;

/** TagBuffer serves one tag's IDs. */
export class TagBuffer {
  private cur: Span | undefined;
  private nextSpan: Span | undefined;
  private late: Span[] = [];
  private loading: Promise<void> | undefined;
  private readonly abort = new AbortController();
  private waiters: Waiter[] = [];
  private lastErr: IdmintError | undefined;
  private retryAt = 0;
  private backoffMs = 0;
  private closed = false;
  // The highest ID granted here: sent as the floor of every request, and no
  // range at or below it is ever served.
  private floor = 0n;
  // Requests that may have been granted and were not settled when their
  // load gave up: the next load resumes the oldest, under the same ID.
  private pending: Request[] = [];
  private step = 0;
  private minStep = 0;
  private maxStep = 0;
  private rateAt = Date.now();
  private rateIssued = 0;
  private starved = false;
  private lastLatencyMs = 0;
  private issued = 0;
  private counts = { loads: 0, recovered: 0, failures: 0, refused: 0, givenBack: 0, abandoned: 0 };
  /** Requests given up unsettled when a down buffer closed. */
  abandonedRequests = 0;
  /** Called after a load failed with a final refusal (the Client may drop the buffer). */
  onRefused: ((err: IdmintError) => void) | undefined;

  constructor(
    readonly tag: string,
    private readonly granter: Granter,
    private readonly cfg: BufferConfig,
    private readonly hooks: BufferHooks = {},
  ) {
    this.floor = hooks.floor ?? 0n;
  }

  /** empty reports whether the buffer has no ID to hand out now. */
  get empty(): boolean {
    return (this.cur === undefined || this.cur.next > this.cur.last) && (this.nextSpan === undefined || this.nextSpan.next > this.nextSpan.last);
  }

  /** loadedOnce reports whether a range was ever granted to the buffer. */
  get loadedOnce(): boolean {
    return this.counts.loads > 0;
  }

  /** holdsRequests reports whether unsettled requests are kept. */
  get holdsRequests(): boolean {
    return this.pending.length > 0;
  }

  /**
   * tryTake returns the next ID from the ranges in memory, or undefined
   * when both are used up. It starts the next range's load once the
   * threshold of the current one is taken.
   */
  tryTake(): bigint | undefined {
    for (;;) {
      const s = this.cur;
      if (s !== undefined && s.next <= s.last) {
        const id = s.next++;
        this.issued++;
        if (id >= s.prefetchAt && this.nextSpan === undefined && this.loading === undefined) {
          this.startLoad();
        }
        return id;
      }
      if (this.nextSpan === undefined) {
        return undefined;
      }
      this.cur = this.nextSpan;
      this.nextSpan = undefined;
    }
  }

  /** tryTakeN takes up to n consecutive IDs from memory, without waiting. */
  tryTakeN(n: number): Range | undefined {
    for (;;) {
      const s = this.cur;
      const r = s?.take(n);
      if (s !== undefined && r !== undefined) {
        this.issued += Number(r.last - r.first + 1n);
        if (r.last >= s.prefetchAt && this.nextSpan === undefined && this.loading === undefined) {
          this.startLoad();
        }
        return r;
      }
      if (this.nextSpan === undefined) {
        return undefined;
      }
      this.cur = this.nextSpan;
      this.nextSpan = undefined;
    }
  }

  /**
   * take returns up to n consecutive IDs (at least one), waiting when both
   * ranges are empty: for its turn on the ranges that arrive, at most
   * waitTimeoutMs. While a failed load backs off it fails fast.
   */
  take(n: number): Promise<Range> {
    if (this.closed) {
      return Promise.reject(closedError(this.tag));
    }
    const r = this.tryTakeN(n);
    if (r !== undefined) {
      return Promise.resolve(r);
    }
    if (this.loading === undefined) {
      const wait = this.retryAt - Date.now();
      if (this.lastErr !== undefined && wait > 0) {
        return Promise.reject(this.callerError(this.lastErr, wait));
      }
      this.startLoad();
    }
    this.starved = true;
    return new Promise<Range>((resolve, reject) => {
      const w: Waiter = {
        n,
        resolve,
        reject,
        timer: setTimeout(() => {
          this.waiters = this.waiters.filter((x) => x !== w);
          reject(
            new IdmintError(ClientCode.Unavailable, `biz_tag ${JSON.stringify(this.tag)}: no range within ${this.cfg.waitTimeoutMs}ms`, {
              tag: this.tag,
              disposition: "retry",
              cause: this.lastErr,
            }),
          );
        }, this.cfg.waitTimeoutMs),
      };
      this.waiters.push(w);
    });
  }

  // The error a caller gets for err: a final refusal as it is, anything
  // else as "unavailable", worth a retry after retryAfterMs.
  private callerError(err: IdmintError, retryAfterMs: number): IdmintError {
    if (err.final) {
      return err;
    }
    return new IdmintError(ClientCode.Unavailable, `biz_tag ${JSON.stringify(this.tag)}: no ids available, retry in ${Math.ceil(retryAfterMs)}ms: ${err.message}`, {
      tag: this.tag,
      retryAfterMs: Math.ceil(retryAfterMs),
      disposition: "retry",
      cause: err,
    });
  }

  private startLoad(): void {
    if (this.closed || this.loading !== undefined || this.nextSpan !== undefined || Date.now() < this.retryAt) {
      return;
    }
    const size = this.nextSize();
    const started = Date.now();
    this.loading = this.load(size).then(
      (g) => {
        this.loading = undefined;
        this.lastLatencyMs = Date.now() - started;
        this.install(g);
      },
      (e: unknown) => {
        this.loading = undefined;
        this.lastLatencyMs = Date.now() - started;
        this.failed(e instanceof IdmintError ? e : new IdmintError(ClientCode.Transport, String(e), { tag: this.tag, disposition: "retry", cause: e }));
      },
    );
  }

  // nextSize applies the step policy to the rate seen since the last load
  // started; 0 (the tag's step) for the first load.
  private nextSize(): number {
    const now = Date.now();
    let size = 0;
    if (this.step > 0) {
      size = nextStep(
        this.step,
        { used: this.issued - this.rateIssued, elapsedMs: now - this.rateAt, latencyMs: this.lastLatencyMs, starved: this.starved },
        this.minStep,
        this.maxStep,
        this.cfg.periodMs,
      );
    }
    this.rateAt = now;
    this.rateIssued = this.issued;
    this.starved = false;
    return size;
  }

  /**
   * load fetches one range. Its request ID is chosen once, before the first
   * attempt (or resumed from a load that gave up unsettled), and every retry
   * sends it again, to any instance, so it is granted at most once:
   * - a grant is ours (one found again after the tag moved past it is a
   *   settled gap, and the load goes on with a new request);
   * - "not_ours": settled with nothing of ours; a new request, at once;
   * - "final", "refused": the load fails (the request kept if an earlier
   *   attempt may have committed);
   * - "retry": the same request again after a pause with full jitter,
   *   exponential from retryMinMs to retryMaxMs and never shorter than the
   *   instance's RetryInfo, until loadTimeoutMs; then the request is kept
   *   for the next load.
   */
  private async load(size: number): Promise<Grant> {
    const deadline = Date.now() + this.cfg.loadTimeoutMs;
    const signal = this.abort.signal;
    let uncertain = this.pending.length > 0;
    let req = this.pending.shift() ?? this.newRequest(size);
    let lastErr: IdmintError | undefined;
    let pause = false;
    let attempt = 0;
    const renew = () => {
      req = this.newRequest(size);
      uncertain = false;
      pause = false;
      lastErr = undefined;
    };
    for (; ; attempt++) {
      if (pause) {
        let wait = Math.random() * Math.min(this.cfg.retryMinMs * 2 ** Math.min(attempt, 16), this.cfg.retryMaxMs);
        wait = Math.max(wait, lastErr?.retryAfterMs ?? 0);
        if (Date.now() + wait >= deadline || !(await sleep(wait, signal))) {
          break;
        }
      }
      if (signal.aborted || Date.now() >= deadline) {
        break;
      }
      pause = true;
      let g: Grant;
      try {
        g = await this.granter.round(req, this.floor, deadline, signal);
      } catch (e) {
        const err = e as IdmintError;
        switch (err.disposition) {
          case "not_ours":
            this.warn("request settled without a range for this client; the load goes on with a new request", { request_id: req.id, err: err.message });
            renew();
            continue;
          case "final":
          case "refused":
            if (uncertain) {
              this.keep(req);
            }
            throw err;
        }
        uncertain = true;
        lastErr = err;
        continue;
      }
      if (g.recovered && g.last <= this.floor) {
        this.counts.abandoned += Number(g.last - g.first + 1n);
        this.warn("ABANDONED ids: granted to a request whose reply was lost, found only after the tag was granted more; never handed out (a gap)", {
          request_id: req.id,
          first: g.first,
          last: g.last,
        });
        renew();
        continue;
      }
      return g;
    }
    if (uncertain) {
      this.keep(req);
    }
    throw new IdmintError(
      ClientCode.Unavailable,
      `biz_tag ${JSON.stringify(this.tag)}: no range after ${attempt} attempts${lastErr ? `: ${lastErr.message}` : ""}`,
      { tag: this.tag, disposition: "retry", cause: lastErr, retryAfterMs: lastErr?.retryAfterMs },
    );
  }

  private newRequest(size: number): Request {
    return { id: uuidv7(), key: holderKey(), tag: this.tag, size };
  }

  private keep(req: Request): void {
    if (this.pending.length >= maxPending) {
      const dropped = this.pending.shift()!;
      this.warn("ABANDONED request: too many unsettled requests for the tag; if it committed, its range is a gap (the segment log has it)", {
        request_id: dropped.id,
      });
    }
    this.pending.push(req);
  }

  // install serves g: first to the callers waiting, first come first,
  // then to everyone. A range at or below the floor is never served.
  private install(g: Grant): void {
    if (g.first <= this.floor) {
      this.counts.refused++;
      this.counts.abandoned += Number(g.last - g.first + 1n);
      this.failed(
        new IdmintError(
          ClientCode.RolledBack,
          `biz_tag ${JSON.stringify(this.tag)}: REFUSED range [${g.first}, ${g.last}] (request ${g.req.id}): at or below ${this.floor}, already granted here; the database went back in time`,
          { tag: this.tag, disposition: "refused" },
        ),
      );
      return;
    }
    this.floor = g.last;
    this.hooks.raised?.(g.last);
    const refusal = this.hooks.check?.(g);
    if (refusal !== undefined) {
      this.counts.refused++;
      this.counts.abandoned += Number(g.last - g.first + 1n);
      this.failed(refusal);
      return;
    }
    this.step = Number(g.last - g.first + 1n);
    this.minStep = g.minStep;
    this.maxStep = g.maxStep;
    this.lastErr = undefined;
    this.backoffMs = 0;
    this.retryAt = 0;
    this.counts.loads++;
    if (g.recovered) {
      this.counts.recovered++;
      this.warn("RECOVERED range by request id after a lost reply", { request_id: g.req.id, first: g.first, last: g.last });
    }
    const sp = new Span(g.first, g.last, g.req, this.cfg.threshold);
    if (this.closed) {
      this.late.push(sp);
      return;
    }
    if (this.cur !== undefined && this.cur.next <= this.cur.last) {
      this.nextSpan = sp;
      return;
    }
    this.cur = sp;
    let served = 0;
    for (const w of this.waiters) {
      const r = sp.take(w.n);
      if (r === undefined) {
        break;
      }
      this.issued += Number(r.last - r.first + 1n);
      clearTimeout(w.timer);
      w.resolve(r);
      served++;
    }
    this.waiters.splice(0, served);
    if (this.waiters.length > 0 || sp.next > sp.prefetchAt) {
      this.startLoad();
    }
  }

  private failed(err: IdmintError): void {
    this.counts.failures++;
    this.lastErr = err;
    this.backoffMs = Math.min(Math.max(2 * this.backoffMs, this.cfg.minBackoffMs), this.cfg.maxBackoffMs);
    // An unknown tag is answered from memory for a while; other errors for
    // one backoff, so that callers do not pile onto failing instances.
    const hold = err.code === "unknown_tag" ? this.cfg.unknownTtlMs : this.backoffMs;
    this.retryAt = Date.now() + hold;
    if (this.counts.loads > 0 && !err.final) {
      this.warn("range load failed", { err: err.message, retry_in_ms: hold });
    }
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) {
      clearTimeout(w.timer);
      w.reject(this.callerError(err, hold));
    }
    if (err.final) {
      this.onRefused?.(err);
    }
  }

  /**
   * close stops loading, waits up to closeWaitMs for a load in flight, then
   * gives back what it can of the unused IDs, newest first: each give-back
   * leaves the tag's high-water mark just below the range, so the unused
   * range before it goes back next when the two touch. Requests left
   * unsettled are sent once more, and what they were granted given back
   * too. The rest is a gap. Callers waiting get a "closed" error.
   */
  async close(deadline: number, mode: CloseMode = {}): Promise<void> {
    if (this.closed) {
      return;
    }
    this.closed = true;
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) {
      clearTimeout(w.timer);
      w.reject(mode.waiterError ?? closedError(this.tag));
    }
    // The unused IDs are taken out now, before any await: no caller can
    // take from them while close waits below.
    const unused: { r: Range; req: Request }[] = [];
    const add = (s: Span | undefined) => {
      if (s !== undefined && s.next <= s.last) {
        unused.push({ r: { first: s.next, last: s.last }, req: s.req });
        s.next = s.last + 1n;
      }
    };
    add(this.cur);
    add(this.nextSpan);
    this.cur = this.nextSpan = undefined;
    if (this.loading !== undefined && !mode.down) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([this.loading, new Promise<void>((r) => (timer = setTimeout(r, Math.max(0, Math.min(this.cfg.closeWaitMs, deadline - Date.now())))))]);
      clearTimeout(timer);
    }
    this.abort.abort();
    await this.loading;
    // A load that ended during close left its range here, never served.
    this.late.forEach(add);
    this.late = [];
    if (mode.down) {
      // Nothing more goes to a region left: its unsettled requests are
      // never looked up nor sent elsewhere, and nothing is given back.
      for (const req of this.pending.splice(0)) {
        this.abandonedRequests++;
        this.warn("ABANDONED request: its reply was lost and the client left the region; it is never looked up nor sent elsewhere; if it committed, its range is a gap (the region's segment log has it)", {
          request_id: req.id,
        });
      }
      for (const { r } of unused) {
        this.counts.abandoned += Number(r.last - r.first + 1n);
      }
      return;
    }
    for (const req of this.pending.splice(0)) {
      try {
        // Served by nobody: give it back with the rest (the instance takes
        // it back only if nothing was granted above it).
        const g = await this.granter.round(req, this.floor, deadline, new AbortController().signal);
        unused.push({ r: { first: g.first, last: g.last }, req });
      } catch (e) {
        this.warn("ABANDONED request: unsettled at close; if it committed, its range is a gap (the segment log has it)", {
          request_id: req.id,
          err: (e as Error).message,
        });
      }
    }
    unused.sort((a, b) => (a.r.first < b.r.first ? 1 : a.r.first > b.r.first ? -1 : 0));
    let i = 0;
    for (; i < unused.length; i++) {
      const { r, req } = unused[i]!;
      if (i > 0 && unused[i - 1]!.r.first !== r.last + 1n) {
        break;
      }
      let back = false;
      try {
        back = await this.granter.giveBack(req, r, deadline);
      } catch (e) {
        this.warn("could not give back unused ids; they stay a gap", { first: r.first, last: r.last, err: (e as Error).message });
        break;
      }
      if (!back) {
        break;
      }
      this.counts.givenBack += Number(r.last - r.first + 1n);
    }
    for (; i < unused.length; i++) {
      const { r } = unused[i]!;
      this.counts.abandoned += Number(r.last - r.first + 1n);
    }
  }

  stats(): TagStats {
    const range = (s: Span | undefined) => (s === undefined ? undefined : { first: s.first, last: s.last });
    return {
      tag: this.tag,
      current: range(this.cur),
      next: range(this.nextSpan),
      ...this.counts,
      issued: this.issued,
      floor: this.floor,
      step: this.step,
    };
  }

  private warn(message: string, fields: Record<string, unknown>): void {
    this.cfg.logger?.warn(message, { biz_tag: this.tag, ...fields });
  }
}

function closedError(tag: string): IdmintError {
  return new IdmintError(ClientCode.Closed, "idmint client closed", { tag, disposition: "final" });
}

// sleep waits ms, and reports false when signal ended it first.
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) {
    return Promise.resolve(false);
  }
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
