"""Regions against real `idmint serve` processes on real PostgreSQL: each
region its own database, claimed before its tag is made (tests/pg.py).
Skipped without the PostgreSQL server binaries."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import idmint  # noqa: E402

from tests import pg  # noqa: E402
from tests.proxy import LossyProxy  # noqa: E402

cluster: pg.Cluster | None = None


def setUpModule() -> None:
    global cluster
    if pg.pg_bin() is None:
        raise unittest.SkipTest("no PostgreSQL server binaries (initdb, pg_ctl, postgres)")
    cluster = pg.Cluster()


def tearDownModule() -> None:
    if cluster is not None:
        cluster.stop()


def regions_client(a: list[str], b: list[str]) -> idmint.Client:
    return idmint.Client(regions=[idmint.Region("a", a), {"name": "b", "urls": b}],
                         attempt_timeout=1.0, wait_timeout=1.0, probe_min=0.05, probe_max=0.5)


class Load:
    """threads callers of next() on TAG, recording every ID and failure."""

    def __init__(self, c: idmint.Client, threads: int) -> None:
        self.c = c
        self.lock = threading.Lock()
        self.ids: list[int] = []
        self.failed: list[BaseException] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]
        for th in self.threads:
            th.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                i = self.c.next(pg.TAG)
                with self.lock:
                    self.ids.append(i)
            except idmint.IdmintError as e:
                with self.lock:
                    self.failed.append(e)
                time.sleep(0.01)
            time.sleep(0.0005)

    def handed_out(self) -> list[int]:
        with self.lock:
            return list(self.ids)

    def halt(self) -> None:
        self.stop.set()
        for th in self.threads:
            th.join(10)


def eventually(what: str, cond, timeout: float = 30.0) -> float:
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.01)
    return time.monotonic() - start


class RegionsTest(unittest.TestCase):
    def no_duplicates(self, ids: list[int]) -> None:
        self.assertEqual(len(ids), len(set(ids)), f"{len(ids) - len(set(ids))} DUPLICATE ids")

    def in_segment_logs(self, ids: list[int], a: pg.Region, b: pg.Region) -> None:
        """Every ID lies in a range of its region's segment log, and no
        request ID is in both logs."""
        logs = {"a": a.segment_log(), "b": b.segment_log()}
        both = set(logs["a"]) & set(logs["b"])
        self.assertFalse(both, f"requests in both regions' segment logs: {sorted(both)[:3]}")
        for name, log in logs.items():
            ranges = sorted(log.values())
            import bisect
            firsts = [r[0] for r in ranges]
            for i in ids:
                if pg.region_of(i) != name:
                    continue
                k = bisect.bisect_right(firsts, i) - 1
                self.assertTrue(k >= 0 and ranges[k][0] <= i <= ranges[k][1],
                                f"id {i} (region {name}'s share) is in no range of region {name}'s segment log")

    def no_leap(self, r: pg.Region, start: int) -> None:
        """r's ranges follow one another from its tag's start (start): none
        starts past the end of those before it, as one would if a floor
        claimed from another region's share had raised r's max_id."""
        end = start - 1
        for first, last in sorted(r.segment_log().values()):
            self.assertLessEqual(first, end + 1, f"region {r.name}: range [{first}, {last}] starts past {end}, "
                                 f"the end of its ranges before it: its max_id leapt")
            end = max(end, last)

    def test_failover_and_return(self) -> None:
        a = pg.Region(cluster, "a", "a,b", n=2)
        b = pg.Region(cluster, "b", "a,b", n=1)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        c = regions_client(a.urls, b.urls)
        load = Load(c, 4)
        self.addCleanup(load.halt)
        eventually("ids from a", lambda: len(load.handed_out()) > 1000)
        self.assertEqual(c.stats()["region"], "a")
        n0 = len(load.handed_out())
        a.kill()
        failover = eventually("ids from b", lambda: any(pg.region_of(i) == "b" for i in load.handed_out()[n0:]))
        self.assertEqual(c.stats()["region"], "b")
        a.start()
        n1 = len(load.handed_out())
        back = eventually("ids from a again", lambda: any(pg.region_of(i) == "a" for i in load.handed_out()[n1:]))
        time.sleep(0.2)
        load.halt()
        st = c.stats()
        c.close()
        ids = load.handed_out()
        self.no_duplicates(ids)
        self.assertEqual(load.failed, [], "calls failed: the client should have served them from b within their wait")
        self.assertEqual(st["region"], "a")
        self.assertGreaterEqual(st["failovers"], 1)
        self.assertGreaterEqual(st["returns"], 1)
        self.in_segment_logs(ids, a, b)
        self.no_leap(a, 1)
        self.no_leap(b, pg.BLOCK + 1)
        print(f"\nfailover: {len(ids)} ids, 0 duplicates, 0 failed; first id from b {failover:.3f}s after the kill "
              f"(wait 1s), from a again {back:.3f}s after its start; regions {st['regions']}", file=sys.stderr)

    def test_lost_reply(self) -> None:
        a = pg.Region(cluster, "a", "a,b", n=1)
        b = pg.Region(cluster, "b", "a,b", n=1)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        losing = threading.Event()
        # Every reply is lost while losing, /id/live's too: home's probe
        # fails then, so that every reply lost is one of the stint the
        # client leaves.
        proxy = LossyProxy(("127.0.0.1", a.ports[0]), lambda req: losing.is_set())
        self.addCleanup(proxy.close)
        c = regions_client([proxy.url], b.urls)
        load = Load(c, 2)
        self.addCleanup(load.halt)
        eventually("ids from a", lambda: len(load.handed_out()) > 500)
        losing.set()
        n0 = len(load.handed_out())
        eventually("ids from b", lambda: any(pg.region_of(i) == "b" for i in load.handed_out()[n0:]))
        a.kill()
        a.start()
        losing.clear()
        n1 = len(load.handed_out())
        eventually("ids from a again", lambda: any(pg.region_of(i) == "a" for i in load.handed_out()[n1:]))
        load.halt()
        st = c.stats()
        c.close()
        ids = load.handed_out()
        self.no_duplicates(ids)
        self.in_segment_logs(ids, a, b)
        # The ranges committed at home whose every reply was lost: the
        # client never heard of them; none holds an ID handed out. (A
        # request may have committed before losing began, its reply lost
        # after: it counts, as the client never heard of it either.)
        log = a.segment_log()
        lost = {r: log[r] for r in proxy.lost_ids() if r in log}
        self.assertTrue(lost, "no reply was lost after a commit")
        idset = set(ids)
        for r, (first, last) in lost.items():
            inside = [i for i in idset if first <= i <= last]
            self.assertFalse(inside, f"request {r}, whose reply was lost, has ids handed out: {inside[:3]}")
        reg_a = st["regions"][0]
        self.assertGreaterEqual(reg_a["abandoned"], 1, st)
        print(f"\nlost reply: {len(lost)} ranges committed at home with their reply lost, none holds any of "
              f"{len(ids)} ids; regions {st['regions']}", file=sys.stderr)

    def test_overlap(self) -> None:
        a = pg.Region(cluster, "a", "a,b", n=1)
        b = pg.Region(cluster, "b", "b,a", n=1)  # b owns a's blocks
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        c = regions_client(a.urls, b.urls)
        self.addCleanup(c.close)
        from_a = [c.next(pg.TAG) for _ in range(250)]
        self.assertEqual(c.stats()["region"], "a")
        a.kill()
        with self.assertLogs("idmint", logging.ERROR) as logs:
            with self.assertRaises(idmint.SharesOverlap) as cm:
                for _ in range(10_000):
                    c.next(pg.TAG)
        self.assertNotIsInstance(cm.exception, idmint.Unavailable)
        self.assertTrue(any("REFUSING" in m for m in logs.output), logs.output)
        a.start()
        for _ in range(3):
            with self.assertRaises(idmint.SharesOverlap):
                c.next(pg.TAG)
        with self.assertRaises(idmint.SharesOverlap):
            c.next_n(pg.TAG, 5)
        st = c.stats()
        self.assertIsNotNone(st["conflict"])
        # Negative control: b's segment log has a range holding IDs handed
        # out from a: served, they would have been duplicates.
        blog = b.segment_log()
        self.assertTrue(blog, "b granted nothing")
        hit = [i for i in from_a if any(f <= i <= l for f, l in blog.values())]
        self.assertTrue(hit, f"b's ranges {sorted(blog.values())} hold none of a's ids: the test shows nothing")
        print(f"\noverlap: b granted {sorted(blog.values())}, holding {len(hit)} ids handed out from a; refused: {st['conflict']}",
              file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
