// The instances' SegmentService (GrantRange, GiveBack), tried in turn: the
// client's side of the range protocol over Connect.

import { createClient as createConnectClient, type Client as ConnectClient, type Transport } from "@connectrpc/connect";
import { SegmentService } from "./gen/idmint/v1/segments_pb.js";
import { IdmintError, fromConnect, notSent } from "./errors.js";
import { shareFromProto, type Share } from "./share.js";

/** An inclusive range of IDs. */
export interface Range {
  first: bigint;
  last: bigint;
}

/**
 * One range request. Its id (a UUIDv7) and key (the holder key) are chosen
 * before the first attempt; every retry, to any instance, sends the same
 * two, so that the range is granted once and only to this client.
 */
export interface Request {
  id: string;
  key: string;
  tag: string;
  /** The size asked for; 0 asks for the tag's step. */
  size: number;
}

/** A range granted to a request. */
export interface Grant extends Range {
  req: Request;
  /** The tag's step and max_step when it was granted. */
  minStep: number;
  maxStep: number;
  /** The request had been granted before (a retry after a lost reply). */
  recovered: boolean;
  /** The share of the region that granted it, when the reply carried one. */
  share: Share | undefined;
}

/** An instance: its base URL and the Connect transport to it. */
export interface Endpoint {
  url: string;
  transport: Transport;
}

/**
 * Granter sends range requests and give-backs to the instances, starting
 * with the one that answered last. Every error it throws is an
 * IdmintError with its disposition (errors.ts).
 */
export class Granter {
  private readonly clients: { url: string; segments: ConnectClient<typeof SegmentService> }[];
  /** The index of the instance that answered last. */
  private preferred = 0;
  /**
   * Told when one request reached every instance and none answered with a
   * range or a refusal: the client may leave the region.
   */
  onEveryInstanceFailed: ((tag: string, err: IdmintError) => void) | undefined;

  constructor(
    endpoints: Endpoint[],
    private readonly token: string | undefined,
    private readonly attemptTimeoutMs: number,
    /** Range requests sent (attempts, not loads), counted with other granters'. */
    private readonly counter: { requests: number } = { requests: 0 },
  ) {
    this.clients = endpoints.map((e) => ({ url: e.url, segments: createConnectClient(SegmentService, e.transport) }));
  }

  private headers(): Record<string, string> {
    return this.token ? { Authorization: `Bearer ${this.token}` } : {};
  }

  /** Range requests sent (attempts, not loads). */
  get requests(): number {
    return this.counter.requests;
  }

  /**
   * round sends req to every instance once, from the one that answered
   * last, and returns the first grant, or throws the first answer that
   * settles the request (any disposition but "retry"), or else the last
   * error. floor is the highest ID granted to the tag here. No attempt
   * outlasts deadline (a Date.now() value).
   */
  async round(req: Request, floor: bigint, deadline: number, signal: AbortSignal): Promise<Grant> {
    const n = this.clients.length;
    const start = this.preferred;
    let last: IdmintError | undefined;
    for (let i = 0; i < n; i++) {
      const u = (start + i) % n;
      const left = deadline - Date.now();
      if (left <= 0 || signal.aborted) {
        break;
      }
      try {
        const g = await this.grant(u, req, floor, Math.min(this.attemptTimeoutMs, left), signal);
        this.preferred = u;
        return g;
      } catch (e) {
        const err = e as IdmintError;
        if (err.disposition !== "retry") {
          this.preferred = u;
          throw err;
        }
        last = err;
        if (i === n - 1) {
          this.onEveryInstanceFailed?.(req.tag, err);
        }
      }
    }
    throw last ?? new IdmintError("unavailable", `biz_tag ${JSON.stringify(req.tag)}: no time left for a range request`, { tag: req.tag, disposition: "retry" });
  }

  private async grant(u: number, req: Request, floor: bigint, timeoutMs: number, signal: AbortSignal): Promise<Grant> {
    const c = this.clients[u]!;
    this.counter.requests++;
    let reply;
    try {
      reply = await c.segments.grantRange(
        { bizTag: req.tag, size: BigInt(req.size), requestId: req.id, holderKey: req.key, floor },
        { timeoutMs, signal, headers: this.headers() },
      );
    } catch (e) {
      throw fromConnect(e, c.url, req.tag);
    }
    if (reply.requestId !== req.id || reply.bizTag !== req.tag || reply.first < 1n || reply.last < reply.first) {
      // Never served: a reply that is not this request's. The request is
      // sent again, as after any answer that may hide a grant.
      throw new IdmintError(
        "transport",
        `idmint ${c.url} answered request ${req.id} for ${JSON.stringify(req.tag)} with request ${reply.requestId} for ${JSON.stringify(reply.bizTag)}, range [${reply.first}, ${reply.last}]`,
        { tag: req.tag, url: c.url, disposition: "retry" },
      );
    }
    return {
      first: reply.first,
      last: reply.last,
      req,
      minStep: Number(reply.step),
      maxStep: Number(reply.maxStep),
      recovered: reply.recovered,
      share: shareFromProto(reply.region),
    };
  }

  /**
   * giveBack returns r, the unused tail of req's range, with req's holder
   * key, and reports whether the instance took it back (false: the tag was
   * granted more since; the IDs stay a gap). It moves on to the next
   * instance only when the give-back certainly did not reach the last one
   * (a refused connection, an instance shutting down): a give-back that
   * may have been applied is never sent twice.
   */
  async giveBack(req: Request, r: Range, deadline: number): Promise<boolean> {
    const n = this.clients.length;
    const start = this.preferred;
    let last: IdmintError | undefined;
    for (let i = 0; i < n; i++) {
      const c = this.clients[(start + i) % n]!;
      const left = deadline - Date.now();
      if (left <= 0) {
        break;
      }
      try {
        const reply = await c.segments.giveBack(
          { bizTag: req.tag, requestId: req.id, holderKey: req.key, first: r.first, last: r.last },
          { timeoutMs: Math.min(this.attemptTimeoutMs, left), headers: this.headers() },
        );
        return reply.givenBack;
      } catch (e) {
        last = fromConnect(e, c.url, req.tag);
        if (!notSent(last)) {
          break;
        }
      }
    }
    throw last ?? new IdmintError("unavailable", `biz_tag ${JSON.stringify(req.tag)}: no time left to give back [${r.first}, ${r.last}]`, { tag: req.tag, disposition: "retry" });
  }
}
