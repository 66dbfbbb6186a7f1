"""Region shares: which IDs a region's database may grant.

A port of the Go module's wire/share.go (Epoch, Share.NextOwned,
OwnsRange, Compatible, CheckRange, fencedAtSplit), with the same 64-bit
bounds: an ID is 1 to 2^63-1, an open epoch ends at 2^63-1. Python's
integers do not overflow, but every value read from the wire is checked
to fit in a signed 64-bit integer, so that the rules are the Go ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["MAX_ID", "Epoch", "Share", "RegionConflict", "parse_share"]

MAX_ID = (1 << 63) - 1


class RegionConflict(ValueError):
    """Two regions' shares may grant the same ID (wire.ErrRegionConflict)."""


@dataclass(frozen=True)
class Epoch:
    """The IDs [from_, to) cut into blocks of block, block j owned by
    regions[j mod N]; this database is regions[index]. to 0: open, up to
    2^63-1."""

    from_: int
    to: int
    block: int
    regions: tuple[str, ...]
    index: int

    def open(self) -> bool:
        return self.to == 0

    def last(self) -> int:
        return MAX_ID if self.open() else self.to - 1

    def n(self) -> int:
        return len(self.regions)

    def same_scheme(self, o: "Epoch") -> bool:
        return self.from_ == o.from_ and self.block == o.block and self.regions == o.regions

    def overlaps(self, o: "Epoch") -> bool:
        return self.from_ <= o.last() and o.from_ <= self.last()

    def __str__(self) -> str:
        to = "∞" if self.open() else str(self.to)
        return f"[{self.from_}, {to}) block {self.block} {','.join(self.regions)} #{self.index}"

    def next_owned(self, after: int) -> tuple[int, int] | None:
        """The first ID above after that region index owns, and the last ID
        of its block (within the epoch); None when there is none."""
        if after >= self.last():
            return None
        q = max(after + 1, self.from_)
        j = (q - self.from_) // self.block
        n = self.n()
        d = (self.index - j % n + n) % n
        if d > 0:
            if j > (self.last() - self.from_) // self.block - d:
                return None  # the next owned block starts past the epoch
            j += d
            q = self.from_ + j * self.block
        start = self.from_ + j * self.block
        last = self.last()
        if start <= last - (self.block - 1):
            last = start + self.block - 1
        return q, last


@dataclass(frozen=True)
class Share:
    """What one region's database owns: its name, its epochs (sorted,
    disjoint, only the last open) and its slice of the worker IDs."""

    name: str
    epochs: tuple[Epoch, ...] = field(default_factory=tuple)
    worker_slot: int = 0
    worker_slots: int = 0

    def next_owned(self, after: int) -> tuple[int, int] | None:
        for e in self.epochs:
            r = e.next_owned(after)
            if r is not None:
                return r
        return None

    def owns_range(self, first: int, last: int) -> bool:
        """Whether the share owns every ID of [first, last]: a range never
        crosses a block, so its first ID's block holds it all."""
        r = self.next_owned(first - 1)
        return r is not None and r[0] == first and last <= r[1]

    def fence(self) -> int:
        return self.epochs[-1].to if self.epochs else 0

    def compatible(self, o: "Share") -> None:
        """Raises RegionConflict unless the two shares can never grant the
        same ID nor lease the same worker ID."""
        if self.name == o.name:
            raise RegionConflict(f"both regions are named {self.name!r}")
        for ea in self.epochs:
            for eb in o.epochs:
                if not ea.overlaps(eb):
                    continue
                if not ea.same_scheme(eb):
                    raise RegionConflict(f"{self.name!r}'s epoch {ea} and {o.name!r}'s epoch {eb} overlap with different blocks")
                if ea.index == eb.index:
                    raise RegionConflict(f"{self.name!r} and {o.name!r} both own index {ea.index} of epoch {ea}")
        if self.worker_slots != o.worker_slots or self.worker_slot == o.worker_slot:
            raise RegionConflict(f"worker slots {self.worker_slot} of {self.worker_slots} ({self.name!r}) and "
                                 f"{o.worker_slot} of {o.worker_slots} ({o.name!r}) may overlap")

    def fenced_at_split(self, o: "Share") -> "Share":
        """The share with its open last epoch fenced at the first epoch of o
        that starts above it, as a split would have fenced it."""
        if not self.epochs or not self.epochs[-1].open():
            return self
        last = self.epochs[-1]
        for e in o.epochs:
            if e.from_ > last.from_:
                return replace(self, epochs=self.epochs[:-1] + (replace(last, to=e.from_),))
        return self

    def check_range(self, first: int, last: int, other: "Share") -> None:
        """Raises RegionConflict unless [first, last], granted by this
        share's region, can hold no ID other's region may grant: this share
        owns it all, and the two are compatible, or are once the open last
        epoch of one is fenced where the other's next epoch starts (a split
        one of the two was read before)."""
        if first < 1 or last < first:
            raise RegionConflict(f"range [{first}, {last}] of {self.name!r} is empty")
        if not self.owns_range(first, last):
            raise RegionConflict(f"range [{first}, {last}] is not in {self.name!r}'s share "
                                 f"{[str(e) for e in self.epochs]}")
        try:
            self.compatible(other)
            return
        except RegionConflict as err:
            fs, fo = self.fenced_at_split(other), other.fenced_at_split(self)
            try:
                fs.compatible(fo)
            except RegionConflict:
                raise err from None
            if not fs.owns_range(first, last):
                raise RegionConflict(f"range [{first}, {last}] of {self.name!r} is above the split at "
                                     f"{fs.fence()} that {other.name!r} shows") from None


def _int64(v: Any, what: str, lo: int = 0) -> int:
    """A decimal string (or integer) within [lo, 2^63-1]."""
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise ValueError(f"share: {what} {v!r}: want a decimal string")
    if isinstance(v, str) and not (v.isascii() and v.lstrip("-").isdigit()):
        raise ValueError(f"share: {what} {v!r}: want a decimal string")
    n = int(v)
    if not lo <= n <= MAX_ID:
        raise ValueError(f"share: {what} {n} out of [{lo}, 2^63-1]")
    return n


def parse_share(js: Any) -> Share:
    """Reads a reply's "region" object; raises ValueError when it is not a
    well-formed share (epochs sorted and disjoint, blocks of at least 1,
    the share's name at each epoch's index)."""
    if not isinstance(js, dict) or not isinstance(js.get("name"), str) or not js["name"]:
        raise ValueError(f"share: {js!r}: want an object with a name")
    epochs = []
    for e in js.get("epochs") or []:
        if not isinstance(e, dict):
            raise ValueError(f"share: epoch {e!r}: want an object")
        regions = e.get("regions")
        index = e.get("index", 0)
        if (not isinstance(regions, list) or not regions or not all(isinstance(r, str) and r for r in regions)
                or len(set(regions)) != len(regions)):
            raise ValueError(f"share: epoch regions {regions!r}: want distinct names")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(regions):
            raise ValueError(f"share: epoch index {index!r} of {len(regions)} regions")
        ep = Epoch(_int64(e.get("from"), "from", 1), _int64(e.get("to", "0"), "to"),
                   _int64(e.get("block"), "block", 1), tuple(regions), index)
        if not ep.open() and ep.to <= ep.from_:
            raise ValueError(f"share: epoch {ep}: empty")
        if regions[index] != js["name"]:
            raise ValueError(f"share: epoch {ep}: index {index} is {regions[index]!r}, not {js['name']!r}")
        if epochs and (epochs[-1].open() or epochs[-1].to > ep.from_):
            raise ValueError(f"share: epoch {ep} overlaps or precedes {epochs[-1]}")
        epochs.append(ep)
    slot, slots = js.get("worker_slot", 0), js.get("worker_slots", 0)
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (slot, slots)):
        raise ValueError(f"share: worker slot {slot!r} of {slots!r}")
    return Share(js["name"], tuple(epochs), slot, slots)
