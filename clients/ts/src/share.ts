// A region's share of the ID space, as its replies carry it, and the rule
// a client of several regions checks each range with: a port of the Go
// module's wire.Share (CheckRange, Compatible, OwnsRange, NextOwned,
// fencedAtSplit), in bigint so that IDs near 2^63-1 neither overflow nor
// lose precision.

import type { RegionShare } from "./gen/idmint/v1/segments_pb.js";

/** The largest ID: 2^63-1. */
export const MAX_ID = (1n << 63n) - 1n;

/**
 * Epoch is the IDs [from, to) cut into blocks of `block`, block j owned by
 * regions[j mod N]; this region is regions[index]. to 0n: open, up to 2^63-1.
 */
export interface Epoch {
  from: bigint;
  to: bigint;
  block: bigint;
  regions: string[];
  index: number;
}

/** Share is what one region's database owns: its epochs (sorted, disjoint, only the last open) and worker slot. */
export interface Share {
  name: string;
  epochs: Epoch[];
  workerSlot: number;
  workerSlots: number;
}

/** ShareConflict is thrown by checkRange: the two shares may grant one ID. */
export class ShareConflict extends Error {
  override name = "ShareConflict";
}

const isOpen = (e: Epoch): boolean => e.to === 0n;
const lastOf = (e: Epoch): bigint => (isOpen(e) ? MAX_ID : e.to - 1n);
const epochString = (e: Epoch): string => `[${e.from}, ${isOpen(e) ? "∞" : e.to}) block ${e.block} ${e.regions.join(",")} #${e.index}`;
const sameScheme = (a: Epoch, b: Epoch): boolean =>
  a.from === b.from && a.block === b.block && a.regions.length === b.regions.length && a.regions.every((r, i) => r === b.regions[i]);
const overlaps = (a: Epoch, b: Epoch): boolean => a.from <= lastOf(b) && b.from <= lastOf(a);

// epochNextOwned is the first ID above after that e's region index owns,
// and the last ID of its block (within e); undefined when there is none.
// Every intermediate stays within [0, 2^63-1], as in the Go code.
function epochNextOwned(e: Epoch, after: bigint): [bigint, bigint] | undefined {
  const last = lastOf(e);
  if (after >= last) {
    return undefined;
  }
  let q = after + 1n > e.from ? after + 1n : e.from;
  let j = (q - e.from) / e.block;
  const n = BigInt(e.regions.length);
  const d = (BigInt(e.index) - (j % n) + n) % n;
  if (d > 0n) {
    if (j > (last - e.from) / e.block - d) {
      return undefined; // the next owned block starts past the epoch
    }
    j += d;
    q = e.from + j * e.block;
  }
  const start = e.from + j * e.block;
  let end = last;
  if (start <= last - (e.block - 1n)) {
    end = start + e.block - 1n;
  }
  return [q, end];
}

/** nextOwned returns the first ID above after that s owns and the last ID of its block; undefined: a fence. */
export function nextOwned(s: Share, after: bigint): [bigint, bigint] | undefined {
  for (const e of s.epochs) {
    const r = epochNextOwned(e, after);
    if (r !== undefined) {
      return r;
    }
  }
  return undefined;
}

/** ownsRange reports whether s owns every ID of [first, last]: a range never crosses a block. */
export function ownsRange(s: Share, first: bigint, last: bigint): boolean {
  const r = nextOwned(s, first - 1n);
  return r !== undefined && r[0] === first && last <= r[1];
}

/** fence is the first ID above s's last epoch (0n when it is open or s has none). */
export function fence(s: Share): bigint {
  return s.epochs.length === 0 ? 0n : s.epochs[s.epochs.length - 1]!.to;
}

/**
 * compatible throws a ShareConflict unless s and o can never grant the same
 * ID nor lease the same worker ID: overlapping epochs cut the IDs the same
 * way with different indexes, and the worker slots are different slots of
 * the same count.
 */
export function compatible(s: Share, o: Share): void {
  if (s.name === o.name) {
    throw new ShareConflict(`both regions are named ${JSON.stringify(s.name)}`);
  }
  for (const ea of s.epochs) {
    for (const eb of o.epochs) {
      if (!overlaps(ea, eb)) {
        continue;
      }
      if (!sameScheme(ea, eb)) {
        throw new ShareConflict(`${JSON.stringify(s.name)}'s epoch ${epochString(ea)} and ${JSON.stringify(o.name)}'s epoch ${epochString(eb)} overlap with different blocks`);
      }
      if (ea.index === eb.index) {
        throw new ShareConflict(`${JSON.stringify(s.name)} and ${JSON.stringify(o.name)} both own index ${ea.index} of epoch ${epochString(ea)}`);
      }
    }
  }
  if (s.workerSlots !== o.workerSlots || s.workerSlot === o.workerSlot) {
    throw new ShareConflict(
      `worker slots ${s.workerSlot} of ${s.workerSlots} (${JSON.stringify(s.name)}) and ${o.workerSlot} of ${o.workerSlots} (${JSON.stringify(o.name)}) may overlap`,
    );
  }
}

// fencedAtSplit is s with its open last epoch fenced at the first epoch of
// o that starts above it, as a split would have fenced it; s itself when
// its last epoch is fenced or o has no such epoch.
function fencedAtSplit(s: Share, o: Share): Share {
  const last = s.epochs[s.epochs.length - 1];
  if (last === undefined || !isOpen(last)) {
    return s;
  }
  for (const e of o.epochs) {
    if (e.from > last.from) {
      return { ...s, epochs: [...s.epochs.slice(0, -1), { ...last, to: e.from }] };
    }
  }
  return s;
}

/**
 * checkRange throws a ShareConflict unless [first, last], granted by the
 * region whose share is s, can hold no ID that the region whose share is
 * other may grant: s owns the whole range, and s and other are compatible,
 * or are once the open last epoch of one is fenced where the other's next
 * epoch starts (a split one of the two was read before), the range lying
 * below that fence of s.
 */
export function checkRange(s: Share, first: bigint, last: bigint, other: Share): void {
  if (first < 1n || last < first) {
    throw new ShareConflict(`range [${first}, ${last}] of ${JSON.stringify(s.name)} is empty`);
  }
  if (!ownsRange(s, first, last)) {
    throw new ShareConflict(`range [${first}, ${last}] is not in ${JSON.stringify(s.name)}'s share ${s.epochs.map(epochString).join(" ")}`);
  }
  try {
    compatible(s, other);
    return;
  } catch (err) {
    const fs = fencedAtSplit(s, other);
    const fo = fencedAtSplit(other, s);
    try {
      compatible(fs, fo);
    } catch {
      throw err;
    }
    if (!ownsRange(fs, first, last)) {
      throw new ShareConflict(`range [${first}, ${last}] of ${JSON.stringify(s.name)} is above the split at ${fence(fs)} that ${JSON.stringify(other.name)} shows`);
    }
  }
}

/** shareFromProto converts a reply's RegionShare (undefined when absent). */
export function shareFromProto(r: RegionShare | undefined): Share | undefined {
  if (r === undefined) {
    return undefined;
  }
  return {
    name: r.name,
    epochs: r.epochs.map((e) => ({ from: e.from, to: e.to, block: e.block, regions: [...e.regions], index: e.index })),
    workerSlot: r.workerSlot,
    workerSlots: r.workerSlots,
  };
}
