"""The Python client against a real `idmint serve` (SQLite), run with
`python3 -m unittest discover -s clients/python/tests -t clients/python`."""

from __future__ import annotations

import os
import socket
import sqlite3
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import idmint  # noqa: E402
from idmint.client import uuid7  # noqa: E402

from tests import server as srv  # noqa: E402
from tests.proxy import LossyProxy  # noqa: E402


def tearDownModule() -> None:
    srv.cleanup_binary()


def closed_port_url() -> str:
    return f"http://127.0.0.1:{srv.free_port()}"


class TestUUID7(unittest.TestCase):
    def test_layout(self) -> None:
        ms = 0x0190D6A27F3C
        u = uuid7(ms)
        self.assertEqual(u.version, 7)
        self.assertEqual(u.int >> 80, ms)
        self.assertEqual((u.int >> 62) & 0b11, 0b10)  # RFC 9562 variant
        self.assertNotEqual(uuid7(ms), uuid7(ms))


class ServerTest(unittest.TestCase):
    """One server per test class, token auth, tag "order" of step 100."""

    tls = False
    extra: list[str] = []

    @classmethod
    def setUpClass(cls) -> None:
        cls.server = srv.Server(auth="token", tls=cls.tls, tokens={"py": "ids", "other": "ids:other"}, extra=cls.extra)
        cls.ids_token = cls.server.tokens["py"]
        cls.other_token = cls.server.tokens["other"]

    @classmethod
    def tearDownClass(cls) -> None:
        cls.server.stop()

    def new_tag(self, step: int = 100, max_step: int = 0) -> str:
        name = self.id().rsplit(".", 1)[-1].replace("_", "-")[:60]
        self.server.tag(name, step, max_step)
        return name

    def segments(self, tag: str) -> list[tuple[str, int, int, int | None]]:
        """The tag's rows of the segment log: request ID, first, last,
        returned_from."""
        path = self.server.db.removeprefix("sqlite://")
        with sqlite3.connect(path) as db:
            return db.execute("SELECT request_id, first_id, last_id, returned_from FROM idmint_segments "
                              "WHERE biz_tag = ? ORDER BY first_id", (tag,)).fetchall()


class TestClient(ServerTest):
    def test_unique_and_consecutive_across_threads(self) -> None:
        tag = self.new_tag(step=100)
        threads, per = 8, 3000
        got: list[list[int]] = [[] for _ in range(threads)]
        with idmint.Client(self.server.url, token=self.ids_token) as c:
            def work(i: int) -> None:
                for _ in range(per):
                    got[i].append(c.next(tag))
            ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            loads = c.stats()["tags"][tag]["loads"]
        every = sorted(i for ids in got for i in ids)
        self.assertEqual(len(every), threads * per)
        # Alone on the tag, its ranges follow each other: 1, 2, … with no
        # duplicate and no gap.
        self.assertEqual(every, list(range(1, threads * per + 1)))
        for ids in got:
            self.assertEqual(ids, sorted(ids), "a thread's IDs go up")
        self.assertGreater(loads, 1, "the client loaded several ranges")

    def test_next_n(self) -> None:
        tag = self.new_tag(step=10, max_step=10)
        with idmint.Client(self.server.url, token=self.ids_token) as c:
            ids = c.next_n(tag, 25)  # three ranges of 10
            self.assertEqual(ids, list(range(1, 26)))
            self.assertEqual(c.next(tag), 26)
            with self.assertRaises(ValueError):
                c.next_n(tag, 0)

    def test_lost_reply_returns_the_same_range(self) -> None:
        tag = self.new_tag(step=100, max_step=100)
        lost = threading.Event()

        def drop_first_grant(request: bytes) -> bool:
            if b"POST /v1/segments " in request and not lost.is_set():
                lost.set()
                return True
            return False

        proxy = LossyProxy(("127.0.0.1", self.server.port), drop_first_grant)
        try:
            with idmint.Client(proxy.url, token=self.ids_token) as c:
                first = c.next(tag)
                st = c.stats()
        finally:
            proxy.close()
        self.assertEqual(proxy.dropped, 1)
        log = self.segments(tag)
        # The lost reply's range (the first granted, [1, 100]) is the one
        # served: the retry got it back under the same request ID.
        self.assertEqual(first, 1)
        self.assertEqual(log[0][1:3], (1, 100))
        self.assertGreaterEqual(st["tags"][tag]["recovered"], 1)
        self.assertEqual(len(log), st["tags"][tag]["loads"], "one log row per range loaded")

    def test_refusals_are_final_and_typed(self) -> None:
        tag = self.new_tag()
        with idmint.Client(self.server.url, token=self.ids_token) as c:
            with self.assertRaises(idmint.UnknownTag) as cm:
                c.next("no-such-tag")
            e = cm.exception
            self.assertEqual((e.status, e.code), (404, "unknown_tag"))
            self.assertNotIsInstance(e, idmint.Unavailable)
            self.assertEqual(c.stats()["requests"], 1, "a refusal costs one request, never a retry")
            with self.assertRaises(idmint.UnknownTag):
                c.next("no-such-tag")
            self.assertEqual(c.stats()["requests"], 1, "answered from memory")
            with self.assertRaises(idmint.InvalidTag) as cm2:
                c.next("not a tag!")
            self.assertEqual((cm2.exception.status, cm2.exception.code), (400, "invalid_biz_tag"))

        with idmint.Client(self.server.url, token="idm_nosuchtoken_" + "x" * 43) as c:
            with self.assertRaises(idmint.Unauthorized) as cm3:
                c.next(tag)
            self.assertEqual((cm3.exception.status, cm3.exception.code), (401, "unauthorized"))
            self.assertNotIn("x" * 43, str(cm3.exception), "the token is never in an error")
            self.assertEqual(c.stats()["requests"], 1)

        with idmint.Client([self.server.url, self.server.url], token=self.other_token) as c:
            with self.assertRaises(idmint.Forbidden) as cm4:
                c.next(tag)
            self.assertEqual((cm4.exception.status, cm4.exception.code), (403, "forbidden"))
            self.assertEqual(c.stats()["requests"], 1, "not tried on the next instance")

    def test_give_back_on_close(self) -> None:
        tag = self.new_tag(step=100)
        with idmint.Client(self.server.url, token=self.ids_token) as c:
            ids = c.next_n(tag, 150)  # into the second range; a third may be prefetched
        self.assertEqual(ids[-1], 150)
        # Visible on the server: max_id is back at the last ID served, and
        # the log says which ranges were given back from where.
        self.assertEqual(self.server.max_id(tag), 150)
        log = self.segments(tag)
        self.assertTrue(any(r[3] is not None for r in log), log)
        self.assertEqual(c.stats()["tags"][tag]["given_back"], log[-1][2] - 150)
        with self.assertRaises(idmint.ClosedError):
            c.next(tag)
        # The next client starts right after.
        with idmint.Client(self.server.url, token=self.ids_token) as c2:
            self.assertEqual(c2.next(tag), 151)

    def test_floor_repairs_a_rollback(self) -> None:
        tag = self.new_tag(step=100, max_step=100)
        with idmint.Client(self.server.url, token=self.ids_token) as c:
            first = c.next_n(tag, 5)  # [1, 100] held, no prefetch yet
            # The database goes back in time: a restore from before the grant.
            path = self.server.db.removeprefix("sqlite://")
            with sqlite3.connect(path) as db:
                db.execute("UPDATE idmint_tags SET max_id = 0 WHERE biz_tag = ?", (tag,))
                db.execute("DELETE FROM idmint_segments WHERE biz_tag = ?", (tag,))
            rest = c.next_n(tag, 200)
            st = c.stats()["tags"][tag]
        ids = first + rest
        self.assertEqual(len(set(ids)), len(ids), "no ID twice")
        self.assertEqual(ids[:100], list(range(1, 101)))
        self.assertGreater(min(ids[100:]), 100)
        # The floor sent with the request raised max_id first: no range at
        # or below it was granted, so none had to be refused.
        self.assertEqual(st["refused_ranges"], 0)
        self.assertGreater(min(r[1] for r in self.segments(tag)), 100)

    def test_fails_over_to_the_next_url(self) -> None:
        tag = self.new_tag()
        with idmint.Client([closed_port_url(), self.server.url], token=self.ids_token) as c:
            self.assertEqual(c.next(tag), 1)

    def test_unavailable_is_bounded(self) -> None:
        c = idmint.Client(closed_port_url(), wait_timeout=0.3, retry_max=0.05)
        start = time.monotonic()
        with self.assertRaises(idmint.Unavailable) as cm:
            c.next("order")
        self.assertLess(time.monotonic() - start, 5)
        self.assertIsInstance(cm.exception.cause, ConnectionRefusedError)
        n = c.stats()["requests"]
        c.close()
        self.assertGreater(n, 1, "retried")


class TestRateLimited(ServerTest):
    """An instance that grants a token 2 ranges a second (burst 4)."""

    extra = ["--range-grants-per-second", "2"]

    def test_429_is_retried_after_its_retry_after(self) -> None:
        tag = self.new_tag(step=10, max_step=10)
        with idmint.Client(self.server.url, token=self.ids_token, wait_timeout=5, retry_max=1) as c:
            ids = c.next_n(tag, 80)  # 8 ranges: past the burst
            st = c.stats()
        self.assertEqual(ids, list(range(1, 81)))
        self.assertGreater(st["requests"], st["tags"][tag]["loads"], "some requests were refused with 429 and sent again")
        self.assertEqual(len(self.segments(tag)), st["tags"][tag]["loads"], "a 429 grants nothing")


class TestTLS(ServerTest):
    tls = True

    def test_client_certificate(self) -> None:
        tag = self.new_tag()
        s = self.server
        with idmint.Client(s.url, token=self.ids_token, ca=s.cert("ca.pem"),
                           cert=s.cert("client.pem"), key=s.cert("client-key.pem")) as c:
            self.assertEqual(c.next_n(tag, 3), [1, 2, 3])
        self.assertEqual(s.max_id(tag), 3, "given back over TLS")
        # Without the client certificate the handshake fails, on every try.
        c = idmint.Client(s.url, token=self.ids_token, ca=s.cert("ca.pem"), wait_timeout=0.3, retry_max=0.05)
        with self.assertRaises(idmint.Unavailable) as cm:
            c.next(tag)
        c.close()
        self.assertIsInstance(cm.exception.cause, (OSError, socket.error))
        # Without the CA the server's certificate is not trusted.
        c = idmint.Client(s.url, token=self.ids_token, wait_timeout=0.3, retry_max=0.05)
        with self.assertRaises(idmint.Unavailable) as cm:
            c.next(tag)
        c.close()
        self.assertIsInstance(cm.exception.cause, __import__("ssl").SSLCertVerificationError)
        with self.assertRaises(ValueError):
            idmint.Client(s.url, cert=s.cert("client.pem"))


if __name__ == "__main__":
    unittest.main()
