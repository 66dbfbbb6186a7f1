"""The share arithmetic (idmint.shares) against the cases of the Go
module's wire/share_test.go and region/region_test.go."""

from __future__ import annotations

import os
import sys
import unittest
from dataclasses import replace

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from idmint.shares import MAX_ID, Epoch, RegionConflict, Share, parse_share  # noqa: E402


def share_of(epochs: list[Epoch], k: int) -> Share:
    return Share(epochs[0].regions[k], tuple(replace(e, index=k) for e in epochs), k, len(epochs[0].regions))


class TestNextOwned(unittest.TestCase):
    def test_cases(self) -> None:
        regions = ("eu", "us", "ap")
        epochs = [Epoch(1, 10_001, 1000, regions, 0), Epoch(10_001, 0, 500, regions[:2], 0)]
        cases = [
            ("eu from nothing", 0, 0, (1, 1000)),
            ("eu inside its block", 0, 499, (500, 1000)),
            ("eu skips us and ap", 0, 1000, (3001, 4000)),
            ("us from nothing", 1, 0, (1001, 2000)),
            ("ap's block clipped by the fence", 2, 8000, (8001, 9000)),
            ("ap past its last block", 2, 9000, None),
            ("eu's last block of epoch 1 then epoch 2", 0, 9999, (10_000, 10_000)),
            ("eu into epoch 2", 0, 10_000, (10_001, 10_500)),
            ("us into epoch 2", 1, 9000, (10_501, 11_000)),
        ]
        for name, k, after, want in cases:
            with self.subTest(name):
                s = share_of(epochs, k)
                if k == 2:
                    s = replace(s, epochs=s.epochs[:1])  # retired: only the fenced epoch
                self.assertEqual(s.next_owned(after), want)

    def test_no_overflow_at_the_top(self) -> None:
        epochs = [Epoch(MAX_ID - 2500, 0, 1000, ("eu", "us"), 0)]
        eu, us = share_of(epochs, 0), share_of(epochs, 1)
        self.assertIsNone(us.next_owned(MAX_ID - 10))
        self.assertEqual(eu.next_owned(MAX_ID - 10), (MAX_ID - 9, MAX_ID))
        self.assertIsNone(eu.next_owned(MAX_ID))
        self.assertTrue(eu.owns_range(MAX_ID - 9, MAX_ID))
        self.assertFalse(eu.owns_range(MAX_ID - 9, MAX_ID + 1))


class TestCompatible(unittest.TestCase):
    def test_cases(self) -> None:
        regions = ("eu", "us")
        open_ = [Epoch(1, 0, 1000, regions, 0)]
        fenced = [Epoch(1, 5001, 1000, regions, 0), Epoch(5001, 0, 1000, ("eu", "us", "ap"), 0)]
        ap = Share("ap", (Epoch(5001, 0, 1000, ("eu", "us", "ap"), 2),), 2, 4)

        def slots(s: Share, slot: int) -> Share:
            return replace(s, worker_slot=slot, worker_slots=4)

        cases = [
            ("two regions of one epoch", slots(share_of(open_, 0), 0), slots(share_of(open_, 1), 1), True),
            ("one fenced, the other not yet", slots(share_of(fenced[:1], 0), 0), slots(share_of(open_, 1), 1), True),
            ("after a split", slots(share_of(fenced, 0), 0), ap, True),
            ("a new region beside an unfenced one", slots(share_of(open_, 0), 0), ap, False),
            ("the same index", slots(share_of(open_, 0), 0), Share("xx", share_of(open_, 0).epochs, 1, 4), False),
            ("the same name", slots(share_of(open_, 0), 0), slots(share_of(open_, 0), 1), False),
            ("another block", slots(share_of(open_, 0), 0), Share("us", (Epoch(1, 0, 999, regions, 1),), 1, 4), False),
            ("the same worker slot", slots(share_of(open_, 0), 1), slots(share_of(open_, 1), 1), False),
            ("another slot count", slots(share_of(open_, 0), 0), Share("us", share_of(open_, 1).epochs, 1, 2), False),
        ]
        for name, a, b, ok in cases:
            with self.subTest(name):
                for x, y in ((a, b), (b, a)):
                    if ok:
                        x.compatible(y)
                    else:
                        with self.assertRaises(RegionConflict):
                            x.compatible(y)


class TestCheckRange(unittest.TestCase):
    def test_cases(self) -> None:
        block, x = 1000, 10_001

        def old(name: str, index: int, slot: int) -> Share:
            return Share(name, (Epoch(1, 0, block, ("eu", "us"), index),), slot, 8)

        def split(s: Share, index: int) -> Share:
            return replace(s, epochs=(replace(s.epochs[0], to=x), Epoch(x, 0, block, ("eu", "us", "ap"), index)))

        eu, us = old("eu", 0, 0), old("us", 1, 1)
        twin = old("ap", 0, 1)
        other_block = replace(us, epochs=(Epoch(1, 0, 500, ("eu", "us"), 1),))
        cases = [
            ("its own block, compatible", us, 1001, 1500, eu, True),
            ("a whole block", us, 1001, 2000, eu, True),
            ("not its block", us, 1, 100, eu, False),
            ("crosses its block's end", us, 1901, 2100, eu, False),
            ("empty", us, 0, 0, eu, False),
            ("the same index", twin, 1, 100, eu, False),
            ("another block size", other_block, 501, 600, eu, False),
            ("split, the other read before it", split(us, 1), x + block, x + block + 9, eu, True),
            ("split, read before the other's", us, 1001, 1500, split(eu, 0), True),
            ("above the split the other shows, in the old scheme", us, x + block, x + block + 9, split(eu, 0), False),
            ("split, the other read before it, its own old epoch", split(us, 1), 3001, 3100, eu, True),
            ("the same worker slot, a split apart", us, 1001, 1500, split(twin, 2), False),
        ]
        for name, s, first, last, other, ok in cases:
            with self.subTest(name):
                if ok:
                    s.check_range(first, last, other)
                else:
                    with self.assertRaises(RegionConflict):
                        s.check_range(first, last, other)


class TestParse(unittest.TestCase):
    def test_wire_form(self) -> None:
        s = parse_share({"name": "b", "epochs": [{"from": "1", "to": "0", "block": "1000000000000000",
                                                  "regions": ["a", "b"], "index": 1}],
                         "worker_slot": 1, "worker_slots": 2})
        self.assertEqual(s.next_owned(0), (10**15 + 1, 2 * 10**15))
        self.assertEqual(s.epochs[0].last(), MAX_ID)

    def test_refused(self) -> None:
        good = {"from": "1", "to": "0", "block": "10", "regions": ["a", "b"], "index": 0}
        for bad in (None, {"epochs": []}, {"name": "a", "epochs": [dict(good, block="0")]},
                    {"name": "a", "epochs": [dict(good, to=str(MAX_ID + 1))]},
                    {"name": "a", "epochs": [dict(good, index=1)]},
                    {"name": "a", "epochs": [dict(good, **{"from": "-1"})]},
                    {"name": "a", "epochs": [good, good]}):
            with self.subTest(bad), self.assertRaises(ValueError):
                parse_share(bad)


if __name__ == "__main__":
    unittest.main()
