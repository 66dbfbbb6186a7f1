// A client's regions: each one's instances and what the client keeps of it
// across its stints (floors, counters), a stint (a period of serving from
// one region, with buffers of its own), and the shares the regions sent.

import { TagBuffer, type BufferConfig } from "./buffer.js";
import { SharesOverlapError, type IdmintError } from "./errors.js";
import { Granter, type Endpoint, type Grant } from "./granter.js";
import { checkRange, ownsRange, type Share } from "./share.js";

/** A region of the client: its name and its instances. */
export interface RegionEndpoints {
  /** Its name ("" for the one unnamed region of a list of URLs). */
  name: string;
  endpoints: Endpoint[];
}

/** A snapshot of one of the client's regions. */
export interface RegionStats {
  name: string;
  /** The region served from now. */
  serving: boolean;
  /** Moves away from it because it could not grant within the wait. */
  left: number;
  /**
   * Requests given up unsettled when the client left it (a reply lost,
   * then the region gone): if one committed, its range is a gap, in the
   * region's segment log under its request ID.
   */
  abandoned: number;
  /** IDs it granted the client that were neither handed out nor given back. */
  gap: number;
}

/** Region is one of the client's regions; index 0 is home. */
export class Region {
  // The highest ID the region granted each tag, kept across stints: the
  // floor sent to a region is its own, never another region's.
  private readonly floors = new Map<string, bigint>();
  left = 0;
  abandoned = 0;
  gap = 0;

  constructor(
    readonly name: string,
    readonly index: number,
    readonly endpoints: Endpoint[],
  ) {}

  floor(tag: string): bigint {
    return this.floors.get(tag) ?? 0n;
  }

  raise(tag: string, last: bigint): void {
    if (last > this.floor(tag)) {
      this.floors.set(tag, last);
    }
  }
}

/**
 * Stint is one period of serving from one region: buffers of its own, fed
 * by a granter of that region's instances only. When the client leaves it,
 * its buffers are closed and its requests never sent again; the next stint,
 * in any region, starts with new request IDs.
 */
export class Stint {
  readonly buffers = new Map<string, TagBuffer>();
  readonly granter: Granter;
  /** Set when the client left it because its region could not grant. */
  down = false;
  private closing: Promise<void> | undefined;

  constructor(
    readonly region: Region,
    token: string | undefined,
    attemptTimeoutMs: number,
    counter: { requests: number },
  ) {
    this.granter = new Granter(region.endpoints, token, attemptTimeoutMs, counter);
  }

  /** buffer makes tag's buffer in the stint, with the region's floor. */
  newBuffer(tag: string, cfg: BufferConfig, check: ((g: Grant) => SharesOverlapError | undefined) | undefined): TagBuffer {
    const b = new TagBuffer(tag, this.granter, cfg, {
      floor: this.region.floor(tag),
      raised: (last) => this.region.raise(tag, last),
      check,
    });
    this.buffers.set(tag, b);
    return b;
  }

  /**
   * close closes every buffer: a stint that is not down gives its tails
   * back to its own region; a down one sends nothing. The gaps and the
   * requests given up are added to the region's counters. Calling it
   * again returns the same promise.
   */
  close(deadline: number, waiterError?: IdmintError): Promise<void> {
    if (this.closing === undefined) {
      const bufs = [...this.buffers.values()];
      this.closing = Promise.allSettled(
        bufs.map((b) => b.close(deadline, { down: this.down, waiterError })),
      ).then(() => {
        for (const b of bufs) {
          this.region.gap += b.stats().abandoned;
          this.region.abandoned += b.abandonedRequests;
        }
      });
    }
    return this.closing;
  }

  get closed(): boolean {
    return this.closing !== undefined;
  }
}

/**
 * Shares holds the share each region sent with its last range, and the
 * first conflict seen (sticky). Checking and recording are one step.
 */
export class Shares {
  private readonly last = new Map<number, Share>();
  conflict: SharesOverlapError | undefined;

  constructor(private readonly regions: Region[]) {}

  /**
   * check returns undefined when r's range [first, last], granted with
   * share s, can be served: with one region always; with several, s must be
   * r's own (named as the client names r), own the range, and pass
   * checkRange against every other region's share seen. Otherwise the
   * conflict, which stays.
   */
  check(r: Region, first: bigint, last: bigint, s: Share | undefined): SharesOverlapError | undefined {
    if (this.regions.length === 1) {
      return undefined;
    }
    if (this.conflict !== undefined) {
      return this.conflict;
    }
    let why: string | undefined;
    let cause: unknown;
    if (s === undefined) {
      why = `region ${JSON.stringify(r.name)} answered a range without a share: its database has none and may grant any id`;
    } else if (s.name !== r.name) {
      why = `region ${JSON.stringify(r.name)} answered with the share of region ${JSON.stringify(s.name)}: its URLs reach another region's instances`;
    } else if (!ownsRange(s, first, last)) {
      why = `region ${JSON.stringify(r.name)} granted [${first}, ${last}], outside its share`;
    } else {
      for (const o of this.regions) {
        const other = this.last.get(o.index);
        if (o === r || other === undefined) {
          continue;
        }
        try {
          checkRange(s, first, last, other);
        } catch (e) {
          why = `region ${JSON.stringify(r.name)}'s range [${first}, ${last}] against region ${JSON.stringify(o.name)}'s share: ${(e as Error).message}`;
          cause = e;
          break;
        }
      }
    }
    if (why !== undefined) {
      this.conflict = new SharesOverlapError(why, cause);
      return this.conflict;
    }
    this.last.set(r.index, s!);
    return undefined;
  }
}
