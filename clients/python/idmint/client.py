"""The idmint client: IDs served in-process from ranges granted exactly once.

A range is asked for with ``POST /v1/segments``. Each request gets a UUIDv7
request ID and a random holder key before its first attempt and keeps them
on every retry, to any instance, so a reply lost after the server committed
comes back on the retry (``"recovered": true``) instead of a second range.
Per tag the client keeps two ranges (a double buffer): the next one is asked
for in the background once a share of the current one is used, and sized
from the rate observed, between the tag's ``step`` and ``max_step``.
``close()`` gives back the unused tail with ``POST /v1/segments/giveback``.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import random
import secrets
import ssl
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from typing import Any, Iterable

from .errors import (
    APIError,
    ClosedError,
    IdmintError,
    Unavailable,
    refusal,
)

__all__ = ["Client", "uuid7"]

log = logging.getLogger("idmint")

PATH_SEGMENTS = "/v1/segments"
PATH_GIVE_BACK = "/v1/segments/giveback"

# DEFAULT_MAX_STEP bounds a range when the tag sets no max_step (the
# server's and the Go client's bound).
DEFAULT_MAX_STEP = 1_000_000
# MAX_REPLY bounds the body read from an instance.
MAX_REPLY = 64 << 10
# REFUSAL_MEMORY is how long a tag's final refusal is answered from memory,
# without a request (the Go client's 5 s).
REFUSAL_MEMORY = 5.0


def uuid7(now_ms: int | None = None) -> uuid.UUID:
    """Returns a UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, the
    version, 74 random bits and the variant."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = rand >> 68  # 12 bits
    rand_b = rand & ((1 << 62) - 1)
    value = ((ms & ((1 << 48) - 1)) << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return uuid.UUID(int=value)


def holder_key() -> str:
    """Returns a new holder key: 32 random bytes in unpadded base64url."""
    return secrets.token_urlsafe(32)


@dataclass
class _Request:
    """One range request: its identity is fixed before the first attempt."""

    id: str
    key: str
    size: int


@dataclass
class _Range:
    """A range granted to req: [first, last]."""

    req: _Request
    first: int
    last: int


class _Tag:
    """One tag's double buffer. cond's lock guards every field."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cond = threading.Condition(threading.Lock())
        self.cur: _Range | None = None  # the range served now
        self.next_id = 1  # the next ID of cur
        self.last = 0  # cur's last ID (next_id > last: cur is empty)
        self.trigger = 0  # taking this ID starts the prefetch
        self.nxt: _Range | None = None  # the prefetched range
        # pending is the request not yet settled: the next load sends it
        # again (same ID, same key) rather than a new one.
        self.pending: _Request | None = None
        self.loader: threading.Thread | None = None
        self.refusal: APIError | None = None
        self.refused_at = 0.0
        self.last_error: BaseException | None = None
        self.closed = False
        self.floor = 0  # the highest ID granted to this client for the tag
        self.min_step = 0  # the tag's step and max_step, from the replies
        self.max_step = 0
        self.size = 0  # the size of the last range asked for
        self.issued = 0  # IDs handed out
        self.mark_time = 0.0  # when the last load started, and issued then
        self.mark_issued = 0
        self.starved = False  # callers waited since the last load started
        # counters for stats()
        self.loads = 0
        self.recovered = 0
        self.refused_ranges = 0
        self.given_back = 0


class Client:
    """Hands out IDs of many tags from ranges granted by idmint instances.

    Thread-safe: ``next`` and ``next_n`` may be called from any number of
    threads. Use it as a context manager, or call ``close()``, so that the
    unused tail of each tag's range is given back.

    urls: base URLs of the instances ("http://host:8080"), a list or a
    comma-separated string. A range request goes to the one that answered
    last, then to the next when it fails.
    token: a bearer token with an ID scope (ids or ids:TAG), for instances
    serving with --auth token. Never logged nor put in an error.
    ca, cert, key: PEM files: the CAs of https:// instances (default: the
    system's) and a client certificate with its key, for instances that
    ask for one (serve --tls-client-ca).
    attempt_timeout: seconds one HTTP attempt may take (each socket
    operation of it).
    wait_timeout: seconds a caller waits when both ranges are empty before
    Unavailable is raised.
    load_timeout: seconds one load keeps retrying its request; a load that
    gives up leaves its request (ID and key) to the tag's next load.
    retry_min, retry_max: bounds of the pause after every instance failed
    once (full jitter, doubling); an instance's Retry-After is honoured
    within retry_max.
    period: the target life of one range, in seconds (Leaf's 15 minutes).
    threshold: the used share of the current range that starts the
    prefetch of the next one.
    """

    def __init__(
        self,
        urls: str | Iterable[str],
        token: str | None = None,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        *,
        attempt_timeout: float = 1.0,
        wait_timeout: float = 2.0,
        load_timeout: float = 10.0,
        retry_min: float = 0.02,
        retry_max: float = 1.0,
        period: float = 900.0,
        threshold: float = 0.1,
    ) -> None:
        if isinstance(urls, str):
            urls = [urls]
        parsed = []
        for raw in urls:
            for one in str(raw).split(","):
                one = one.strip()
                if not one:
                    continue
                u = urllib.parse.urlsplit(one)
                if u.scheme not in ("http", "https") or not u.hostname:
                    raise ValueError(f"idmint: URL {one!r}: want http(s)://host[:port]")
                parsed.append(u)
        if not parsed:
            raise ValueError("idmint: no URLs")
        if (cert is None) != (key is None):
            raise ValueError("idmint: client certificate: give both the certificate and its key")
        if attempt_timeout <= 0 or wait_timeout <= 0 or load_timeout <= 0:
            raise ValueError("idmint: timeouts must be above 0")
        if not 0 < threshold < 1:
            raise ValueError("idmint: threshold must be between 0 and 1")
        self._urls = parsed
        self._token = token or ""
        self._ssl: ssl.SSLContext | None = None
        if ca or cert or any(u.scheme == "https" for u in parsed):
            ctx = ssl.create_default_context(cafile=ca)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            if cert:
                ctx.load_cert_chain(cert, key)
            self._ssl = ctx
        self._attempt_timeout = attempt_timeout
        self._wait_timeout = wait_timeout
        self._load_timeout = load_timeout
        self._retry_min, self._retry_max = retry_min, max(retry_min, retry_max)
        self._period, self._threshold = period, threshold
        self._lock = threading.Lock()  # guards _tags, _preferred, _requests
        self._tags: dict[str, _Tag] = {}
        self._preferred = 0  # index in _urls of the instance that answered last
        self._requests = 0  # range requests sent, retries included
        self._closed = threading.Event()

    # The public calls.

    def next(self, tag: str) -> int:
        """Returns the next ID of tag.

        In steady state it takes a lock and adds one; it waits only when both
        ranges are empty, at most wait_timeout, and then raises Unavailable.
        A refusal (UnknownTag, Forbidden, ...) is raised at once.
        """
        t = self._tags.get(tag) or self._tag(tag)
        with t.cond:
            i = t.next_id
            if i <= t.last:
                t.next_id = i + 1
                t.issued += 1
                if i >= t.trigger and t.nxt is None and t.loader is None and not t.closed:
                    self._start_load_locked(t)
                return i
            return self._take_locked(t, 1)[0]

    def next_n(self, tag: str, n: int) -> list[int]:
        """Returns n IDs of tag, increasing.

        On error the exception's ``ids`` holds the IDs taken before it
        (maybe none): they are the caller's, unique like any other.
        """
        if n < 1:
            raise ValueError(f"count {n}: must be at least 1")
        t = self._tags.get(tag) or self._tag(tag)
        with t.cond:
            return self._take_locked(t, n)

    def close(self, timeout: float = 5.0) -> None:
        """Stops background loads and gives back, for each tag, the unused
        part of its newest range (and the tail of the range before it, when
        the two touch). The server takes it back only if nobody was granted
        anything since; otherwise the IDs stay a gap, never a duplicate.
        next() raises ClosedError afterwards. timeout bounds the wait for
        loads in flight."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            tags = list(self._tags.values())
        loaders = []
        for t in tags:
            with t.cond:
                t.closed = True
                t.cond.notify_all()
                if t.loader is not None:
                    loaders.append(t.loader)
        deadline = time.monotonic() + timeout
        for th in loaders:
            th.join(max(0.0, deadline - time.monotonic()))
        for t in tags:
            with t.cond:
                backs: list[tuple[_Request, int, int]] = []
                if t.nxt is not None:
                    backs.append((t.nxt.req, t.nxt.first, t.nxt.last))
                if t.cur is not None and t.next_id <= t.last and (t.nxt is None or t.last + 1 == t.nxt.first):
                    backs.append((t.cur.req, t.next_id, t.last))
                t.next_id, t.nxt = t.last + 1, None
            for req, first, last in backs:
                # Newest first: when it stays (someone was granted since),
                # the older tail cannot be taken back either.
                try:
                    ok = self._give_back(t.name, req, first, last)
                except (IdmintError, OSError, http.client.HTTPException, ValueError) as e:
                    log.warning("idmint: give back %s [%d, %d]: %s", t.name, first, last, e)
                    break
                if not ok:
                    break
                with t.cond:
                    t.given_back += last - first + 1

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
        """Returns a snapshot: range requests sent (retries included) and,
        per tag, ranges loaded, ranges recovered after a lost reply, ranges
        refused (starting at or below the floor), IDs issued and given back."""
        with self._lock:
            tags = dict(self._tags)
            out: dict[str, Any] = {"requests": self._requests, "tags": {}}
        for name, t in sorted(tags.items()):
            with t.cond:
                out["tags"][name] = {
                    "loads": t.loads,
                    "recovered": t.recovered,
                    "refused_ranges": t.refused_ranges,
                    "issued": t.issued,
                    "given_back": t.given_back,
                    "floor": t.floor,
                    "step": t.size,
                }
        return out

    # The buffer.

    def _tag(self, name: str) -> _Tag:
        with self._lock:
            if self._closed.is_set():
                raise ClosedError("idmint: client closed")
            t = self._tags.get(name)
            if t is None:
                t = self._tags[name] = _Tag(name)
            return t

    def _take_locked(self, t: _Tag, n: int) -> list[int]:
        """Takes n IDs of t, waiting for ranges at most wait_timeout each
        time both are empty. t.cond is held."""
        ids: list[int] = []
        deadline = time.monotonic() + self._wait_timeout
        while True:
            if t.closed:
                e: IdmintError = ClosedError("idmint: client closed")
                e.ids = ids
                raise e
            if t.next_id <= t.last:
                k = min(n - len(ids), t.last - t.next_id + 1)
                ids.extend(range(t.next_id, t.next_id + k))
                t.next_id += k
                t.issued += k
                if t.next_id - 1 >= t.trigger and t.nxt is None and t.loader is None:
                    self._start_load_locked(t)
                if len(ids) == n:
                    return ids
                deadline = time.monotonic() + self._wait_timeout
                continue
            if t.nxt is not None:
                self._switch_locked(t)
                continue
            if t.refusal is not None:
                if time.monotonic() - t.refused_at < REFUSAL_MEMORY:
                    r = t.refusal
                    err = refusal(r.url, r.status, r.code, r.message, r.tag)
                    err.ids = ids
                    raise err
                t.refusal = None
            t.starved = True
            if t.loader is None:
                self._start_load_locked(t)
            left = deadline - time.monotonic()
            if left <= 0:
                cause = t.last_error
                e = Unavailable(f"idmint: no ids of {t.name!r} available: no instance granted a range in time"
                                + (f" (last error: {cause})" if cause else ""), cause)
                e.ids = ids
                raise e
            t.cond.wait(left)

    def _switch_locked(self, t: _Tag) -> None:
        """Makes the prefetched range the current one. t.cond is held."""
        r = t.nxt
        assert r is not None
        t.nxt = None
        self._serve_locked(t, r)

    def _serve_locked(self, t: _Tag, r: _Range) -> None:
        t.cur, t.next_id, t.last = r, r.first, r.last
        t.trigger = r.first + max(0, math.ceil(self._threshold * (r.last - r.first + 1)) - 1)

    def _start_load_locked(self, t: _Tag) -> None:
        """Starts a background load of t's next range. t.cond is held."""
        now = time.monotonic()
        size = 0  # the tag's step, until a reply says what it is
        if t.min_step:
            size = self._next_size(t, now)
        t.mark_time, t.mark_issued, t.starved = now, t.issued, False
        if t.pending is None:
            t.pending = _Request(str(uuid7()), holder_key(), size)
        th = threading.Thread(target=self._load, args=(t,), name=f"idmint-load-{t.name}", daemon=True)
        t.loader = th
        th.start()

    def _next_size(self, t: _Tag, now: float) -> int:
        """Sizes the next range so that it lasts about period at the rate
        observed since the last load started: at most 4x the last size (16x
        when callers waited), at least half, within [step, max_step]."""
        lo = max(1, t.min_step)
        hi = max(lo, t.max_step or DEFAULT_MAX_STEP)
        last = max(t.size, lo)
        used, elapsed = t.issued - t.mark_issued, now - t.mark_time
        if used <= 0 or elapsed <= 0:
            return min(max(last // 2, lo), hi)
        want = used / elapsed * self._period
        up = (16 if t.starved else 4) * last
        size = min(max(math.ceil(min(want, up)), last // 2), hi)
        return min(max(size, lo), hi)

    def _load(self, t: _Tag) -> None:
        """Asks for t's pending request until an instance grants it, refuses
        it, or load_timeout passes (the request then stays pending)."""
        deadline = time.monotonic() + self._load_timeout
        rounds = 0
        try:
            while not self._closed.is_set():
                with t.cond:
                    req, floor = t.pending, t.floor
                if req is None:
                    return
                reply, err, retry_after = self._round(t.name, req, floor)
                if reply is not None:
                    if self._install(t, req, reply):
                        return
                    continue
                if isinstance(err, APIError) and err.not_ours:
                    # Settled without a range for us: a new request.
                    with t.cond:
                        t.pending = _Request(str(uuid7()), holder_key(), req.size)
                    continue
                if isinstance(err, APIError) and err.final:
                    with t.cond:
                        t.pending = None
                        t.refusal, t.refused_at, t.last_error = err, time.monotonic(), err
                        t.cond.notify_all()
                    return
                if isinstance(err, APIError) and err.code in ("rolled_back", "tag_exhausted"):
                    # Refused on the server's side: nothing was granted.
                    with t.cond:
                        t.pending = _Request(str(uuid7()), holder_key(), req.size)
                with t.cond:
                    t.last_error = err
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                pause = random.uniform(0, min(self._retry_max, self._retry_min * (2**rounds)))
                if retry_after is not None:
                    pause = max(pause, min(retry_after, self._retry_max))
                rounds += 1
                self._closed.wait(min(pause, left))
        finally:
            with t.cond:
                if t.loader is threading.current_thread():
                    t.loader = None
                t.cond.notify_all()

    def _install(self, t: _Tag, req: _Request, reply: dict[str, Any]) -> bool:
        """Takes a granted range into t's buffer; False when it starts at or
        below an ID already granted (a database that went back in time): it
        is never served, and a new request goes out."""
        first, last = int(reply["first"]), int(reply["last"])
        with t.cond:
            t.pending = None
            if first <= t.floor:
                t.refused_ranges += 1
                t.pending = _Request(str(uuid7()), holder_key(), req.size)
                log.warning("idmint: %s: range [%d, %d] starts at or below %d, granted before: refused",
                            t.name, first, last, t.floor)
                return False
            t.floor = last
            t.loads += 1
            t.recovered += bool(reply.get("recovered"))
            t.min_step = max(1, int(reply.get("step") or 1))
            t.max_step = int(reply.get("max_step") or 0)
            t.size = last - first + 1
            t.last_error = None
            r = _Range(req, first, last)
            if t.closed:
                # Too late to serve; close() gives it back if it still can.
                t.nxt = t.nxt or r
            elif t.next_id > t.last and t.nxt is None:
                self._serve_locked(t, r)
            else:
                t.nxt = r
            t.cond.notify_all()
            return True

    # The wire.

    def _round(self, tag: str, req: _Request, floor: int) -> tuple[dict[str, Any] | None, BaseException | None, float | None]:
        """Sends req to every instance once, starting with the one that
        answered last; returns the first grant or settled answer, else the
        last error and the largest Retry-After seen."""
        body: dict[str, Any] = {"biz_tag": tag, "size": req.size, "request_id": req.id, "holder_key": req.key}
        if floor > 0:
            body["floor"] = str(floor)
        with self._lock:
            start = self._preferred
        n = len(self._urls)
        err: BaseException | None = None
        retry_after: float | None = None
        for i in range(n):
            u = (start + i) % n
            with self._lock:
                self._requests += 1
            try:
                reply = self._post(u, PATH_SEGMENTS, body, tag, {"Idempotency-Key": req.id})
                if (reply.get("request_id") != req.id or reply.get("biz_tag") != tag
                        or int(reply["first"]) < 1 or int(reply["last"]) < int(reply["first"])):
                    raise ValueError(f"idmint {self._base(u)} answered request {req.id} for {tag!r} "
                                     f"with {reply.get('request_id')} for {reply.get('biz_tag')!r}")
            except APIError as e:
                if e.final or e.code in ("rolled_back", "tag_exhausted"):
                    with self._lock:
                        self._preferred = u
                    return None, e, None
                err = e
                ra = getattr(e, "retry_after", None)
                if ra is not None:
                    retry_after = max(retry_after or 0.0, ra)
                continue
            except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as e:
                # No answer, or one that may hide a grant: the same request
                # goes to the next instance.
                err = e
                continue
            with self._lock:
                self._preferred = u
            return reply, None, None
        return None, err, retry_after

    def _give_back(self, tag: str, req: _Request, first: int, last: int) -> bool:
        """Gives back [first, last] of req's range, with req's holder key.
        It moves to the next instance only when the request certainly did
        not reach the last one (no connection, or an instance shutting
        down): a give-back that may have been applied is never sent twice."""
        body = {"biz_tag": tag, "request_id": req.id, "holder_key": req.key, "first": str(first), "last": str(last)}
        with self._lock:
            start = self._preferred
        n = len(self._urls)
        for i in range(n):
            u = (start + i) % n
            try:
                reply = self._post(u, PATH_GIVE_BACK, body, tag)
                return bool(reply.get("given_back"))
            except ConnectionRefusedError:
                if i == n - 1:
                    raise
            except APIError as e:
                if e.code != "shutting_down" or i == n - 1:
                    raise
        return False

    def _base(self, u: int) -> str:
        p = self._urls[u]
        return f"{p.scheme}://{p.netloc}{p.path.rstrip('/')}"

    def _post(self, u: int, path: str, body: dict[str, Any], tag: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
        """POSTs body as JSON to instance u; returns the decoded 200 reply,
        raises the typed APIError of any other."""
        p = self._urls[u]
        port = p.port
        if p.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                p.hostname, port, timeout=self._attempt_timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(p.hostname, port, timeout=self._attempt_timeout)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        if extra:
            headers.update(extra)
        url = self._base(u) + path
        try:
            conn.request("POST", p.path.rstrip("/") + path, body=json.dumps(body).encode(), headers=headers)
            resp = conn.getresponse()
            data = resp.read(MAX_REPLY + 1)
            if len(data) > MAX_REPLY:
                raise ValueError(f"reply of {url} is over {MAX_REPLY} bytes")
            if resp.status != 200:
                code, message = "http_error", resp.reason or str(resp.status)
                try:
                    e = json.loads(data)["error"]
                    if e.get("code"):
                        code, message = str(e["code"]), str(e.get("message", ""))
                except (ValueError, KeyError, TypeError, AttributeError):
                    pass
                err = refusal(url, resp.status, code, message, tag)
                err.retry_after = _retry_after(resp.getheader("Retry-After"))  # type: ignore[attr-defined]
                raise err
            reply = json.loads(data)
            if not isinstance(reply, dict):
                raise ValueError(f"reply of {url} is not a JSON object")
            return reply
        finally:
            conn.close()


def _retry_after(value: str | None) -> float | None:
    """Reads a Retry-After header given in seconds; None when absent or not
    a number of seconds."""
    if not value:
        return None
    try:
        s = float(value)
    except ValueError:
        return None
    return s if s >= 0 and math.isfinite(s) else None
