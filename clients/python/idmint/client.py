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
    SharesOverlap,
    Unavailable,
    refusal,
)
from .shares import RegionConflict, Share, parse_share

__all__ = ["Client", "Region", "uuid7"]

log = logging.getLogger("idmint")

PATH_SEGMENTS = "/v1/segments"
PATH_GIVE_BACK = "/v1/segments/giveback"
PATH_LIVE = "/id/live"

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


@dataclass(frozen=True)
class Region:
    """One region of a deployment: idmint instances sharing a database whose
    share of every tag's ID space is disjoint from the other regions'
    (docs/regions.md). name names it in logs and stats; urls as Client's."""

    name: str
    urls: tuple[str, ...] | list[str] | str


class _Region:
    """One of the client's regions: its instances, and what the client keeps
    of it across its stints. The client's _lock guards every field."""

    def __init__(self, name: str, index: int, urls: list[urllib.parse.SplitResult]) -> None:
        self.name, self.index, self.urls = name, index, urls
        self.preferred = 0  # index in urls of the instance that answered last
        # floors holds the highest ID the region granted to each tag, kept
        # across stints: the floor sent to a region is its own, never
        # another region's, whose IDs lie in another share.
        self.floors: dict[str, int] = {}
        self.left = 0  # moves away because it could not grant
        self.abandoned = 0  # requests given up as ambiguous when it was left
        self.gap = 0  # IDs of stints left, never handed out nor given back


class _Stint:
    """One period of the client serving from one region: buffers and
    pending requests of its own, whose requests, lookups and give-backs go
    to that region and nowhere else. The client's _lock guards tags."""

    def __init__(self, region: _Region) -> None:
        self.region = region
        self.tags: dict[str, _Tag] = {}
        # left: the client serves from another stint now (callers waiting
        # here go on there); down: it was left because its region could not
        # grant: nothing more is sent under it, its unsettled requests are
        # given up (gaps if they committed), its give-backs skipped (gaps).
        self.left = False
        self.down = False
        # uncertain holds the IDs of the requests whose last round left
        # their fate unknown (no answer, or one that may hide a grant).
        self.uncertain: set[str] = set()


class _Left(Exception):
    """The stint a caller waited on was left: go on in the one serving."""

    def __init__(self, ids: list[int]) -> None:
        super().__init__("stint left")
        self.ids = ids


class _Tag:
    """One tag's double buffer in one stint. cond's lock guards every field."""

    def __init__(self, name: str, stint: _Stint) -> None:
        self.name = name
        self.stint = stint
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
        self.floor = 0  # the highest ID granted to this stint for the tag
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

    def empty_locked(self) -> bool:
        return self.next_id > self.last and self.nxt is None


def _parse_urls(urls: str | Iterable[str]) -> list[urllib.parse.SplitResult]:
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
    return parsed


class Client:
    """Hands out IDs of many tags from ranges granted by idmint instances.

    Thread-safe: ``next`` and ``next_n`` may be called from any number of
    threads. Use it as a context manager, or call ``close()``, so that the
    unused tail of each tag's range is given back.

    urls: base URLs of the instances ("http://host:8080"), a list or a
    comma-separated string. A range request goes to the one that answered
    last, then to the next when it fails. They are one region, without a
    name; give regions instead for several.
    regions: the regions of a deployment, in order of preference (home
    first): ``Region(name, urls)`` or ``{"name": ..., "urls": [...]}``. The
    client serves from one region at a time, moves to the next when it
    cannot grant within the wait, checks every range against the regions'
    shares, and comes back home once home grants again (README, "Regions").
    urls and regions cannot both be given.
    probe_min, probe_max: bounds of the pause between two probes of home
    while the client serves from another region (doubling, jittered).
    token: a bearer token with an ID scope (ids or ids:TAG), for instances
    serving with --auth token. Never logged nor put in an error.
    ca, cert, key: PEM files: the CAs of https:// instances (default: the
    system's) and a client certificate with its key, for instances that
    ask for one (serve --tls-client-ca).
    attempt_timeout: seconds one HTTP attempt may take (each socket
    operation of it).
    wait_timeout: seconds a caller waits when both ranges are empty before
    Unavailable is raised (with several regions: before the client moves
    to the next region, once per region).
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
        urls: str | Iterable[str] | None = None,
        token: str | None = None,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        *,
        regions: Iterable[Region | dict[str, Any]] | None = None,
        attempt_timeout: float = 1.0,
        wait_timeout: float = 2.0,
        load_timeout: float = 10.0,
        retry_min: float = 0.02,
        retry_max: float = 1.0,
        period: float = 900.0,
        threshold: float = 0.1,
        probe_min: float = 0.25,
        probe_max: float = 10.0,
    ) -> None:
        self._regions: list[_Region] = []
        if urls is not None and regions is not None:
            raise ValueError("idmint: urls and regions are both given: give the URLs as one of the regions")
        if regions is None:
            parsed = _parse_urls(urls if urls is not None else [])
            if not parsed:
                raise ValueError("idmint: no URLs")
            self._regions.append(_Region("", 0, parsed))
        else:
            for i, r in enumerate(regions):
                name, rurls = (r.get("name"), r.get("urls")) if isinstance(r, dict) else (r.name, r.urls)
                if not name:
                    raise ValueError(f"idmint: region {i} has no name")
                if any(x.name == name for x in self._regions):
                    raise ValueError(f"idmint: region {name!r} is named twice")
                parsed = _parse_urls(rurls or [])
                if not parsed:
                    raise ValueError(f"idmint: region {name!r} has no URLs")
                self._regions.append(_Region(str(name), i, parsed))
            if not self._regions:
                raise ValueError("idmint: no regions")
        if (cert is None) != (key is None):
            raise ValueError("idmint: client certificate: give both the certificate and its key")
        if attempt_timeout <= 0 or wait_timeout <= 0 or load_timeout <= 0:
            raise ValueError("idmint: timeouts must be above 0")
        if not 0 < threshold < 1:
            raise ValueError("idmint: threshold must be between 0 and 1")
        if not 0 < probe_min <= probe_max:
            raise ValueError("idmint: want 0 < probe_min <= probe_max")
        self._token = token or ""
        self._ssl: ssl.SSLContext | None = None
        if ca or cert or any(u.scheme == "https" for r in self._regions for u in r.urls):
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
        self._probe_min, self._probe_max = probe_min, probe_max
        # _lock guards _serving, the regions' and stints' fields, _shares,
        # _requests and the counters below.
        self._lock = threading.Lock()
        self._serving = _Stint(self._regions[0])
        self._requests = 0  # range requests sent, retries included
        self._failovers = 0
        self._returns = 0
        self._probing = False
        # _shares holds the share each region (by index) sent with its last
        # range; _conflict the first disagreement between them (sticky).
        self._shares: dict[int, Share] = {}
        self._conflict: SharesOverlap | None = None
        self._bg: list[threading.Thread] = []  # stints closing, the probe
        self._closed = threading.Event()

    @property
    def _multi(self) -> bool:
        return len(self._regions) > 1

    # The public calls.

    def next(self, tag: str) -> int:
        """Returns the next ID of tag.

        In steady state it takes a lock and adds one; it waits only when both
        ranges are empty, at most wait_timeout, and then raises Unavailable
        (with several regions, after trying the next ones). A refusal
        (UnknownTag, Forbidden, ...) is raised at once; SharesOverlap once
        two regions' shares conflict.
        """
        st = self._serving
        t = st.tags.get(tag) or self._tag(st, tag)
        with t.cond:
            i = t.next_id
            if i <= t.last and not st.left and self._conflict is None:
                t.next_id = i + 1
                t.issued += 1
                if i >= t.trigger and t.nxt is None and t.loader is None and not t.closed:
                    self._start_load_locked(t)
                return i
        return self._in_regions(tag, 1)[0]

    def next_n(self, tag: str, n: int) -> list[int]:
        """Returns n IDs of tag, increasing.

        On error the exception's ``ids`` holds the IDs taken before it
        (maybe none): they are the caller's, unique like any other. A region
        that fails after handing out some of the n leaves them with the
        error: two regions' IDs are not in order.
        """
        if n < 1:
            raise ValueError(f"count {n}: must be at least 1")
        return self._in_regions(tag, n)

    def _in_regions(self, tag: str, n: int) -> list[int]:
        """Takes n IDs of tag in the stint serving, and again in the next
        region's when the client moves (a fresh wait per region left)."""
        moves = 0
        deadline = time.monotonic() + self._wait_timeout
        while True:
            self._check_conflict()
            st = self._serving
            t = st.tags.get(tag) or self._tag(st, tag)
            try:
                with t.cond:
                    return self._take_locked(t, n, deadline)
            except _Left as e:
                if e.ids:
                    err = Unavailable(f"idmint: {t.name!r}: the client moved to another region after {len(e.ids)} ids")
                    err.ids = e.ids
                    raise err from None
                continue
            except Unavailable as e:
                if not self._multi or e.ids or self._closed.is_set() or moves >= len(self._regions) - 1:
                    raise
                self._leave(st, e)
                moves += 1
                deadline = time.monotonic() + self._wait_timeout

    def _check_conflict(self) -> None:
        c = self._conflict
        if c is not None:
            err = SharesOverlap(str(c))
            err.__cause__ = c.__cause__
            raise err

    def close(self, timeout: float = 5.0) -> None:
        """Stops background loads and gives back, for each tag, the unused
        part of its newest range (and the tail of the range before it, when
        the two touch), to the region that granted it. The server takes it
        back only if nobody was granted anything since; otherwise the IDs
        stay a gap, never a duplicate. next() raises ClosedError afterwards.
        timeout bounds the wait for loads in flight."""
        with self._lock:
            if self._closed.is_set():
                return
            self._closed.set()
            st = self._serving
            bg = list(self._bg)
        deadline = time.monotonic() + timeout
        for th in bg:
            th.join(max(0.0, deadline - time.monotonic()))
        self._close_stint(st, timeout=max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
        """Returns a snapshot: range requests sent (retries included); per
        tag of the stint serving, ranges loaded, ranges recovered after a
        lost reply, ranges refused (starting at or below the floor), IDs
        issued and given back; the region served from now ("" for one
        unnamed region), failovers and returns; per region, the moves away
        (left), requests given up (abandoned) and IDs left unused (gap);
        and the shares conflict (None while there is none)."""
        with self._lock:
            st = self._serving
            tags = dict(st.tags)
            out: dict[str, Any] = {
                "requests": self._requests, "tags": {}, "region": st.region.name,
                "failovers": self._failovers, "returns": self._returns,
                "regions": [{"name": r.name, "serving": r is st.region, "left": r.left,
                             "abandoned": r.abandoned, "gap": r.gap} for r in self._regions],
                "conflict": str(self._conflict) if self._conflict else None,
            }
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

    def _tag(self, st: _Stint, name: str) -> _Tag:
        with self._lock:
            if self._closed.is_set():
                raise ClosedError("idmint: client closed")
            t = st.tags.get(name)
            if t is None:
                t = st.tags[name] = _Tag(name, st)
                t.closed = st.left
            return t

    def _take_locked(self, t: _Tag, n: int, deadline: float) -> list[int]:
        """Takes n IDs of t, waiting for ranges until deadline, which moves
        on each time IDs are taken. t.cond is held."""
        ids: list[int] = []
        while True:
            if self._conflict is not None:
                try:
                    self._check_conflict()
                except SharesOverlap as e:
                    e.ids = ids
                    raise
            if t.stint.left and not self._closed.is_set():
                raise _Left(ids)
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
                where = f" of region {t.stint.region.name!r}" if self._multi else ""
                e = Unavailable(f"idmint: no ids of {t.name!r} available: no instance{where} granted a range in time"
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
        """Asks for t's pending request until an instance of the stint's
        region grants it, refuses it, or load_timeout passes (the request
        then stays pending). A stint down sends nothing more."""
        st, reg = t.stint, t.stint.region
        deadline = time.monotonic() + self._load_timeout
        rounds = 0
        try:
            while not self._closed.is_set() and not st.down and self._conflict is None:
                with t.cond:
                    req = t.pending
                    floor = max(t.floor, reg.floors.get(t.name, 0))
                if req is None:
                    return
                reply, err, retry_after = self._round(st, t.name, req, floor)
                with self._lock:
                    if reply is not None or (isinstance(err, APIError) and (err.final or err.not_ours or
                                                                            err.code in ("rolled_back", "tag_exhausted"))):
                        st.uncertain.discard(req.id)
                    elif err is not None:
                        st.uncertain.add(req.id)
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
                    empty = t.empty_locked()
                if err is not None and self._multi and empty and not st.down:
                    # Every instance failed one request while the buffer is
                    # empty: callers wait on a region that cannot grant.
                    self._leave(st, err)
                    return
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
        is never served, and a new request goes out. With several regions
        the range is served only when the shares allow it (_check_share)."""
        first, last = int(reply["first"]), int(reply["last"])
        reg = t.stint.region
        if self._multi and not self._check_share(reg, first, last, reply.get("region")):
            with t.cond:
                t.pending = None
                t.cond.notify_all()
            with self._lock:
                reg.gap += last - first + 1
            return True
        with t.cond:
            t.pending = None
            if first <= t.floor:
                t.refused_ranges += 1
                t.pending = _Request(str(uuid7()), holder_key(), req.size)
                log.warning("idmint: %s: range [%d, %d] starts at or below %d, granted before: refused",
                            t.name, first, last, t.floor)
                return False
            t.floor = last
            with self._lock:
                reg.floors[t.name] = max(reg.floors.get(t.name, 0), last)
            t.loads += 1
            t.recovered += bool(reply.get("recovered"))
            t.min_step = max(1, int(reply.get("step") or 1))
            t.max_step = int(reply.get("max_step") or 0)
            t.size = last - first + 1
            t.last_error = None
            r = _Range(req, first, last)
            if t.closed:
                # Too late to serve; the stint's close gives it back if it can.
                t.nxt = t.nxt or r
            elif t.next_id > t.last and t.nxt is None:
                self._serve_locked(t, r)
            else:
                t.nxt = r
            t.cond.notify_all()
            return True

    # Regions.

    def _check_share(self, reg: _Region, first: int, last: int, raw: Any) -> bool:
        """Reports whether reg's range [first, last], granted with the share
        raw, can be served: raw must be reg's own share (named as the client
        names reg) and own the range, and the range must hold no ID another
        region's share seen may grant (Share.check_range). Otherwise the
        conflict is recorded (sticky): nothing more is handed out. Checking
        and recording are one step under _lock."""
        with self._lock:
            if self._conflict is not None:
                return False
            why: str | None = None
            share: Share | None = None
            if raw is None:
                why = f"region {reg.name!r} answered a range without a share: its database has none and may grant any id"
            else:
                try:
                    share = parse_share(raw)
                except ValueError as e:
                    why = f"region {reg.name!r} answered with a share that cannot be read: {e}"
            if share is not None:
                if share.name != reg.name:
                    why = f"region {reg.name!r} answered with the share of region {share.name!r}: its URLs reach another region's instances"
                elif not share.owns_range(first, last):
                    why = f"region {reg.name!r} granted [{first}, {last}], outside its share {[str(e) for e in share.epochs]}"
                else:
                    for o in self._regions:
                        other = self._shares.get(o.index)
                        if other is None or o is reg:
                            continue
                        try:
                            share.check_range(first, last, other)
                        except RegionConflict as e:
                            why = f"region {reg.name!r}'s range [{first}, {last}] against region {o.name!r}'s share: {e}"
                            break
            if why is None:
                assert share is not None
                self._shares[reg.index] = share
                return True
            self._conflict = SharesOverlap(f"idmint: the regions' shares may overlap: the client hands out no more ids: {why}")
            st = self._serving
            tags = list(st.tags.values())
        log.error("idmint: REFUSING every call: two regions' shares may overlap; no id is handed out until the "
                  "shares are fixed and the client is made again: %s (range [%d, %d] not served: a gap)", why, first, last)
        for t in tags:
            with t.cond:
                t.cond.notify_all()
        return False

    def _leave(self, st: _Stint, why: BaseException) -> None:
        """Moves the client from st, which could not grant, to the next
        region in order of preference, unless it left st already; st is
        closed in the background as down."""
        with self._lock:
            if self._closed.is_set() or self._serving is not st or self._conflict is not None:
                return
            nxt = self._regions[(st.region.index + 1) % len(self._regions)]
            st.down = True
            st.region.left += 1
            self._failovers += 1
            self._switch_stint_locked(_Stint(nxt))
            probe = nxt.index != 0 and not self._probing
            if probe:
                self._probing = True
                th = threading.Thread(target=self._probe_home, name="idmint-probe-home", daemon=True)
                self._bg.append(th)
        log.warning("idmint: MOVED to another region: this one could not grant within the wait; its unsettled "
                    "requests are given up (gaps if they committed), never sent elsewhere: from %s to %s: %s",
                    st.region.name, nxt.name, why)
        if probe:
            th.start()

    def _switch_stint_locked(self, st: _Stint) -> None:
        """Makes st the stint serving and closes the one before in the
        background. _lock is held."""
        old, self._serving = self._serving, st
        old.left = True
        th = threading.Thread(target=self._close_stint, args=(old,), name="idmint-close-stint", daemon=True)
        self._bg = [b for b in self._bg if b.is_alive()] + [th]
        th.start()

    def _close_stint(self, st: _Stint, timeout: float | None = None) -> None:
        """Closes st: its loads are stopped; a stint not down gives back its
        tails to its own region; a down one sends nothing, and its unused
        IDs are a gap. Its requests still uncertain are then given up, each
        counted and logged."""
        timeout = 2 * self._attempt_timeout if timeout is None else timeout
        with self._lock:
            st.left = True
            tags = list(st.tags.values())
        loaders = []
        for t in tags:
            with t.cond:
                t.closed = True
                t.cond.notify_all()
                if t.loader is not None and t.loader is not threading.current_thread():
                    loaders.append(t.loader)
        deadline = time.monotonic() + timeout
        for th in loaders:
            th.join(max(0.0, deadline - time.monotonic()))
        reg = st.region
        for t in tags:
            with t.cond:
                backs: list[tuple[_Request, int, int]] = []
                if t.nxt is not None:
                    backs.append((t.nxt.req, t.nxt.first, t.nxt.last))
                if t.cur is not None and t.next_id <= t.last:
                    backs.append((t.cur.req, t.next_id, t.last))
                t.next_id, t.nxt = t.last + 1, None
            unused = sum(last - first + 1 for _, first, last in backs)
            given = 0
            for i, (req, first, last) in enumerate(backs):
                # Newest first: when it stays (someone was granted since),
                # the older tail cannot be taken back either; and it only
                # can when the two touch.
                if st.down or (i == 1 and backs[0][1] != last + 1):
                    break
                try:
                    ok = self._give_back(reg, t.name, req, first, last)
                except (IdmintError, OSError, http.client.HTTPException, ValueError) as e:
                    log.warning("idmint: give back %s [%d, %d]: %s", t.name, first, last, e)
                    break
                if not ok:
                    break
                given += last - first + 1
            with t.cond:
                t.given_back += given
            if self._multi:
                with self._lock:
                    reg.gap += unused - given
        if not self._multi:
            return
        with self._lock:
            lost = sorted(st.uncertain)
            st.uncertain.clear()
            reg.abandoned += len(lost)
        for rid in lost:
            log.warning("idmint: ABANDONED request: its reply was lost and the client left the region; it is never "
                        "looked up nor sent elsewhere; if it committed, its range is a gap (the region's segment "
                        "log has it): region %s request_id %s", reg.name, rid)

    def _probe_home(self) -> None:
        """Runs while the client serves from a region other than home: with
        backoff from probe_min to probe_max (doubling, jittered) it checks
        that an instance of home is live (GET /id/live), then loads each
        tag's first range in a new stint at home, and moves back home once
        every tag has one. A probe that fails costs no range: its stint's
        ranges are given back to home."""
        home = self._regions[0]
        pause = self._probe_min
        while True:
            if self._closed.wait(pause / 2 + random.uniform(0, pause / 2)):
                return
            with self._lock:
                if self._serving.region is home or self._conflict is not None:
                    self._probing = False
                    return
                tags = list(self._serving.tags)
            if self._live(home) and self._try_return(home, tags):
                return
            pause = min(2 * pause, self._probe_max)

    def _try_return(self, home: _Region, tags: list[str]) -> bool:
        """Loads the first range of every tag in a new stint at home and
        switches to it when all have one; reports whether it did (or the
        probing is over)."""
        st = _Stint(home)
        deadline = time.monotonic() + self._wait_timeout
        ready = True
        for name in tags:
            try:
                t = self._tag(st, name)
            except ClosedError:
                return True
            with t.cond:
                while t.empty_locked() and t.refusal is None:
                    if t.loader is None:
                        self._start_load_locked(t)
                    left = deadline - time.monotonic()
                    if left <= 0 or self._closed.is_set() or self._conflict is not None:
                        break
                    t.cond.wait(left)
                if t.empty_locked():
                    log.info("idmint: home region %s live but not granting yet: %s: %s", home.name, name, t.last_error)
                    ready = False
            if not ready:
                break
        with self._lock:
            over = self._closed.is_set() or self._conflict is not None or self._serving.region is home
            if ready and not over:
                frm = self._serving.region.name
                self._switch_stint_locked(st)
                self._returns += 1
                self._probing = False
                log.warning("idmint: RETURNED to the home region: it grants again: from %s to %s", frm, home.name)
                return True
            if over:
                self._probing = False
        self._close_stint(st)
        return over

    def _live(self, reg: _Region) -> bool:
        """Reports whether an instance of reg answers GET /id/live."""
        for p in reg.urls:
            conn = self._conn(p)
            try:
                conn.request("GET", p.path.rstrip("/") + PATH_LIVE)
                resp = conn.getresponse()
                resp.read(MAX_REPLY)
                if resp.status == 200:
                    return True
            except (OSError, http.client.HTTPException):
                pass
            finally:
                conn.close()
        return False

    # The wire.

    def _round(self, st: _Stint, tag: str, req: _Request, floor: int) -> tuple[dict[str, Any] | None, BaseException | None, float | None]:
        """Sends req to every instance of st's region once, starting with
        the one that answered last; returns the first grant or settled
        answer, else the last error and the largest Retry-After seen."""
        body: dict[str, Any] = {"biz_tag": tag, "size": req.size, "request_id": req.id, "holder_key": req.key}
        if floor > 0:
            body["floor"] = str(floor)
        reg = st.region
        with self._lock:
            start = reg.preferred
        n = len(reg.urls)
        err: BaseException | None = None
        retry_after: float | None = None
        for i in range(n):
            if st.down:
                break
            u = (start + i) % n
            with self._lock:
                self._requests += 1
            try:
                reply = self._post(reg.urls[u], PATH_SEGMENTS, body, tag, {"Idempotency-Key": req.id})
                if (reply.get("request_id") != req.id or reply.get("biz_tag") != tag
                        or int(reply["first"]) < 1 or int(reply["last"]) < int(reply["first"])):
                    raise ValueError(f"idmint {self._base(reg.urls[u])} answered request {req.id} for {tag!r} "
                                     f"with {reply.get('request_id')} for {reply.get('biz_tag')!r}")
            except APIError as e:
                if e.final or e.code in ("rolled_back", "tag_exhausted"):
                    with self._lock:
                        reg.preferred = u
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
                reg.preferred = u
            return reply, None, None
        return None, err, retry_after

    def _give_back(self, reg: _Region, tag: str, req: _Request, first: int, last: int) -> bool:
        """Gives back [first, last] of req's range, with req's holder key, to
        reg, the region that granted it. It moves to the next instance only
        when the request certainly did not reach the last one (no
        connection, or an instance shutting down): a give-back that may have
        been applied is never sent twice."""
        body = {"biz_tag": tag, "request_id": req.id, "holder_key": req.key, "first": str(first), "last": str(last)}
        with self._lock:
            start = reg.preferred
        n = len(reg.urls)
        for i in range(n):
            u = (start + i) % n
            try:
                reply = self._post(reg.urls[u], PATH_GIVE_BACK, body, tag)
                return bool(reply.get("given_back"))
            except ConnectionRefusedError:
                if i == n - 1:
                    raise
            except APIError as e:
                if e.code != "shutting_down" or i == n - 1:
                    raise
        return False

    @staticmethod
    def _base(p: urllib.parse.SplitResult) -> str:
        return f"{p.scheme}://{p.netloc}{p.path.rstrip('/')}"

    def _conn(self, p: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        if p.scheme == "https":
            return http.client.HTTPSConnection(p.hostname, p.port, timeout=self._attempt_timeout, context=self._ssl)
        return http.client.HTTPConnection(p.hostname, p.port, timeout=self._attempt_timeout)

    def _post(self, p: urllib.parse.SplitResult, path: str, body: dict[str, Any], tag: str,
              extra: dict[str, str] | None = None) -> dict[str, Any]:
        """POSTs body as JSON to the instance at p; returns the decoded 200
        reply, raises the typed APIError of any other."""
        conn = self._conn(p)
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        if extra:
            headers.update(extra)
        url = self._base(p) + path
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
