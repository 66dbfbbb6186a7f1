"""idmint: unique 64-bit IDs per tag, served in-process from ranges that
idmint instances grant exactly once.

    import idmint

    with idmint.Client(["http://idmint-1:8080", "http://idmint-2:8080"], token=TOKEN) as c:
        order_id = c.next("order")
        ids = c.next_n("order", 100)

Standard library only (Python 3.11+). See clients/python/README.md.
"""

from .client import Client, Region, uuid7
from .errors import (
    APIError,
    ClosedError,
    Forbidden,
    IdmintError,
    InvalidRequest,
    InvalidTag,
    Refused,
    SharesOverlap,
    Unauthorized,
    Unavailable,
    UnknownTag,
)

__all__ = [
    "Client",
    "Region",
    "uuid7",
    "IdmintError",
    "APIError",
    "Refused",
    "InvalidRequest",
    "InvalidTag",
    "Unauthorized",
    "Forbidden",
    "UnknownTag",
    "Unavailable",
    "ClosedError",
    "SharesOverlap",
]
