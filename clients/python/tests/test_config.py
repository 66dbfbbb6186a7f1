"""The client's regions configuration: what it refuses (no server needed)."""

from __future__ import annotations

import os
import sys
import unittest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import idmint  # noqa: E402


class TestRegionsConfig(unittest.TestCase):
    def test_refused(self) -> None:
        u = ["http://127.0.0.1:1"]
        for name, kw in [
            ("urls and regions", {"urls": u, "regions": [idmint.Region("a", u)]}),
            ("no urls nor regions", {}),
            ("no regions", {"regions": []}),
            ("a region without a name", {"regions": [idmint.Region("", u)]}),
            ("a region without URLs", {"regions": [idmint.Region("a", [])]}),
            ("a name twice", {"regions": [idmint.Region("a", u), {"name": "a", "urls": u}]}),
            ("a bad URL", {"regions": [idmint.Region("a", ["ftp://x"])]}),
            ("probe bounds", {"regions": [idmint.Region("a", u)], "probe_min": 2.0, "probe_max": 1.0}),
        ]:
            with self.subTest(name), self.assertRaises(ValueError):
                idmint.Client(**kw)

    def test_taken(self) -> None:
        c = idmint.Client(regions=[idmint.Region("a", "http://127.0.0.1:1,http://127.0.0.1:2"),
                                   {"name": "b", "urls": ["http://127.0.0.1:3"]}])
        st = c.stats()
        self.assertEqual(st["region"], "a")
        self.assertEqual([r["name"] for r in st["regions"]], ["a", "b"])
        self.assertIsNone(st["conflict"])
        c.close()
        one = idmint.Client("http://127.0.0.1:1")
        self.assertEqual(one.stats()["region"], "")
        one.close()

    def test_shares_overlap_is_not_unavailable(self) -> None:
        self.assertFalse(issubclass(idmint.SharesOverlap, idmint.Unavailable))
        self.assertTrue(issubclass(idmint.SharesOverlap, idmint.IdmintError))


if __name__ == "__main__":
    unittest.main()
