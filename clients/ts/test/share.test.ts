// The share arithmetic against the Go module's cases (wire/share_test.go,
// region/region_test.go), in bigint up to 2^63-1.

import { strict as assert } from "node:assert";
import { describe, it } from "node:test";
import { SharesOverlapError } from "../src/errors.js";
import { Region, Shares } from "../src/region.js";
import { checkRange, compatible, MAX_ID, nextOwned, ShareConflict, type Epoch, type Share } from "../src/share.js";

function shareOf(epochs: Omit<Epoch, "index">[], k: number, slots = epochs[0]!.regions.length): Share {
  return { name: epochs[0]!.regions[k]!, workerSlot: k, workerSlots: slots, epochs: epochs.map((e) => ({ ...e, index: k })) };
}

describe("share.nextOwned", () => {
  const regions = ["eu", "us", "ap"];
  const epochs = [
    { from: 1n, to: 10_001n, block: 1000n, regions },
    { from: 10_001n, to: 0n, block: 500n, regions: regions.slice(0, 2) },
  ];
  const cases: [string, number, bigint, [bigint, bigint] | undefined][] = [
    ["eu from nothing", 0, 0n, [1n, 1000n]],
    ["eu inside its block", 0, 499n, [500n, 1000n]],
    ["eu skips us and ap", 0, 1000n, [3001n, 4000n]],
    ["us from nothing", 1, 0n, [1001n, 2000n]],
    ["ap's block clipped by the fence", 2, 8000n, [8001n, 9000n]],
    ["ap past its last block", 2, 9000n, undefined],
    ["eu's last block of epoch 1 then epoch 2", 0, 9999n, [10_000n, 10_000n]],
    ["eu into epoch 2", 0, 10_000n, [10_001n, 10_500n]],
    ["us into epoch 2", 1, 9000n, [10_501n, 11_000n]],
  ];
  for (const [name, k, after, want] of cases) {
    it(name, () => {
      const s = shareOf(epochs, k);
      if (k === 2) s.epochs = s.epochs.slice(0, 1); // retired: only the fenced epoch
      assert.deepEqual(nextOwned(s, after), want);
    });
  }
  it("does not overflow at the top", () => {
    const e = [{ from: MAX_ID - 2500n, to: 0n, block: 1000n, regions: ["eu", "us"] }];
    const eu = shareOf(e, 0);
    const us = shareOf(e, 1);
    assert.equal(nextOwned(us, MAX_ID - 10n), undefined);
    assert.deepEqual(nextOwned(eu, MAX_ID - 10n), [MAX_ID - 9n, MAX_ID]);
    assert.equal(nextOwned(eu, MAX_ID), undefined);
  });
});

describe("share.compatible", () => {
  const regions = ["eu", "us"];
  const open = [{ from: 1n, to: 0n, block: 1000n, regions }];
  const fenced = [
    { from: 1n, to: 5001n, block: 1000n, regions },
    { from: 5001n, to: 0n, block: 1000n, regions: ["eu", "us", "ap"] },
  ];
  const ap: Share = { name: "ap", epochs: [{ from: 5001n, to: 0n, block: 1000n, regions: ["eu", "us", "ap"], index: 2 }], workerSlot: 2, workerSlots: 4 };
  const slots = (s: Share, slot: number): Share => ({ ...s, workerSlot: slot, workerSlots: 4 });
  const cases: [string, Share, Share, boolean][] = [
    ["two regions of one epoch", slots(shareOf(open, 0), 0), slots(shareOf(open, 1), 1), true],
    ["one fenced, the other not yet", slots(shareOf(fenced.slice(0, 1), 0), 0), slots(shareOf(open, 1), 1), true],
    ["after a split", slots(shareOf(fenced, 0), 0), ap, true],
    ["a new region beside an unfenced one", slots(shareOf(open, 0), 0), ap, false],
    ["the same index", slots(shareOf(open, 0), 0), { name: "xx", epochs: shareOf(open, 0).epochs, workerSlot: 1, workerSlots: 4 }, false],
    ["the same name", slots(shareOf(open, 0), 0), slots(shareOf(open, 0), 1), false],
    ["another block", slots(shareOf(open, 0), 0), { name: "us", epochs: [{ from: 1n, to: 0n, block: 999n, regions, index: 1 }], workerSlot: 1, workerSlots: 4 }, false],
    ["the same worker slot", slots(shareOf(open, 0), 1), slots(shareOf(open, 1), 1), false],
    ["another slot count", slots(shareOf(open, 0), 0), { name: "us", epochs: shareOf(open, 1).epochs, workerSlot: 1, workerSlots: 2 }, false],
  ];
  for (const [name, a, b, ok] of cases) {
    it(name, () => {
      for (const [x, y] of [
        [a, b],
        [b, a],
      ] as const) {
        if (ok) compatible(x, y);
        else assert.throws(() => compatible(x, y), ShareConflict);
      }
    });
  }
});

describe("share.checkRange", () => {
  const block = 1000n;
  const x = 10_001n; // a cycle start of two regions above 1
  const old = (name: string, index: number, slot: number): Share => ({
    name,
    workerSlot: slot,
    workerSlots: 8,
    epochs: [{ from: 1n, to: 0n, block, regions: ["eu", "us"], index }],
  });
  // split is s after `region split --add ap` at x.
  const split = (s: Share, index: number): Share => ({
    ...s,
    epochs: [{ ...s.epochs[0]!, to: x }, { from: x, to: 0n, block, regions: ["eu", "us", "ap"], index }],
  });
  const eu = old("eu", 0, 0);
  const us = old("us", 1, 1);
  const twin = old("ap", 0, 1); // eu's index, us's worker slot
  const otherBlock: Share = { ...us, epochs: [{ from: 1n, to: 0n, block: 500n, regions: ["eu", "us"], index: 1 }] };
  const cases: [string, Share, bigint, bigint, Share, boolean][] = [
    ["its own block, compatible", us, 1001n, 1500n, eu, true],
    ["a whole block", us, 1001n, 2000n, eu, true],
    ["not its block", us, 1n, 100n, eu, false],
    ["crosses its block's end", us, 1901n, 2100n, eu, false],
    ["empty", us, 0n, 0n, eu, false],
    ["the same index", twin, 1n, 100n, eu, false],
    ["another block size", otherBlock, 501n, 600n, eu, false],
    ["split, the other read before it", split(us, 1), x + block, x + block + 9n, eu, true],
    ["split, read before the other's", us, 1001n, 1500n, split(eu, 0), true],
    ["above the split the other shows, in the old scheme", us, x + block, x + block + 9n, split(eu, 0), false],
    ["split, the other read before it, its own old epoch", split(us, 1), 3001n, 3100n, eu, true],
    ["the same worker slot, a split apart", us, 1001n, 1500n, split(twin, 2), false],
  ];
  for (const [name, s, first, last, other, ok] of cases) {
    it(name, () => {
      if (ok) checkRange(s, first, last, other);
      else assert.throws(() => checkRange(s, first, last, other), ShareConflict);
    });
  }
});

describe("Shares.check", () => {
  // With several regions, a range is served only with its own region's
  // share, which owns it and agrees with the others'; the first
  // disagreement stays.
  const regions = [new Region("a", 0, []), new Region("b", 1, [])];
  const [a, b] = regions as [Region, Region];
  const share = (name: string, index: number): Share => ({
    name,
    workerSlot: index,
    workerSlots: 8,
    epochs: [{ from: 1n, to: 0n, block: 100n, regions: ["a", "b"], index }],
  });
  const cases: [string, Region, bigint, bigint, Share | undefined][] = [
    ["no share", b, 101n, 200n, undefined],
    ["another region's share", b, 1n, 100n, share("a", 0)],
    ["outside its share", b, 1n, 100n, share("b", 1)],
    ["overlapping a's", b, 1n, 100n, { name: "b", workerSlot: 1, workerSlots: 8, epochs: [{ from: 1n, to: 0n, block: 100n, regions: ["b", "a"], index: 0 }] }],
  ];
  for (const [name, from, first, last, s] of cases) {
    it(name, () => {
      const sh = new Shares(regions);
      assert.equal(sh.check(a, 1n, 100n, share("a", 0)), undefined, "a's own range");
      assert.ok(sh.check(from, first, last, s) instanceof SharesOverlapError);
      assert.ok(sh.check(a, 201n, 300n, share("a", 0)) instanceof SharesOverlapError, "a range after the conflict");
    });
  }
  it("b's first range of all with a's share", () => {
    assert.ok(new Shares(regions).check(b, 1n, 100n, share("a", 0)) instanceof SharesOverlapError);
  });
  it("serves ranges that agree, and a single region without a share", () => {
    const sh = new Shares(regions);
    assert.equal(sh.check(a, 1n, 100n, share("a", 0)), undefined);
    assert.equal(sh.check(b, 101n, 200n, share("b", 1)), undefined);
    assert.equal(sh.check(a, 201n, 250n, share("a", 0)), undefined);
    assert.equal(new Shares([a]).check(a, 101n, 200n, undefined), undefined);
  });
});
