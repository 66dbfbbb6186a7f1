// The dynamic step, as idmint's segment.StepPolicy sizes it: the next range
// lasts about one period at the rate observed, bounded by the tag's step
// and max_step.

/** The bound of one range when the tag sets no max_step (Leaf's). */
export const DEFAULT_MAX_STEP = 1_000_000;

// Growth per load when callers never waited, and when they did (the rate
// seen is then only what the ranges allowed).
const growth = 4;
const starvedGrowth = 16;
// A range covers this many load latencies at the observed rate, at most
// maxCoverMs of that rate, so the next load lands before it runs out.
const coverFactor = 4;
const maxCoverMs = 1000;

/** What a buffer observed since its last load started. */
export interface Sample {
  /** IDs handed out. */
  used: number;
  /** Milliseconds they took. */
  elapsedMs: number;
  /** The last load's latency in milliseconds (0: unknown). */
  latencyMs: number;
  /** Callers found the buffer empty and waited. */
  starved: boolean;
}

/**
 * nextStep returns the size of the next range from the size of the last
 * one and what was observed: it follows the rate, moving at most 4× up
 * (16× when callers waited, and at least the cover of the load latency) and
 * 2× down per load, within [min, max] (max 0: DEFAULT_MAX_STEP).
 */
export function nextStep(last: number, s: Sample, min: number, max: number, periodMs: number): number {
  const lo = Math.max(min, 1);
  const hi = Math.max(max > 0 ? max : DEFAULT_MAX_STEP, lo);
  const clamp = (v: number, a: number, b: number) => Math.min(Math.max(v, a), b);
  last = Math.max(last, lo);
  if (s.used <= 0 || s.elapsedMs <= 0 || periodMs <= 0) {
    return clamp(Math.floor(last / 2), lo, hi);
  }
  const rate = s.used / s.elapsedMs; // IDs per millisecond
  const want = Math.min(rate * periodMs, hi);
  let up = (s.starved ? starvedGrowth : growth) * last;
  const cover = rate * coverFactor * Math.min(s.latencyMs, maxCoverMs / coverFactor);
  up = Math.min(Math.max(up, cover), hi);
  const next = clamp(Math.ceil(Math.min(want, up)), Math.floor(last / 2), hi);
  return clamp(next, lo, hi);
}
