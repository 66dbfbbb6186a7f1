"""Errors raised by idmint.Client.

Refusals (subclasses of Refused) are final: the request itself is refused,
and asking again, here or on another instance, cannot change it; they are
raised at once and never retried. Unavailable is worth a retry after a
pause: the client already tried every instance. Every error an instance
answered carries its stable machine-readable code (``code``), taken from
the JSON error body ``{"error": {"code": ..., "message": ...}}``.
"""

from __future__ import annotations

__all__ = [
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


class IdmintError(Exception):
    """Base class of every error the client raises.

    ``ids`` holds the IDs a call took before it failed (next_n): they are
    the caller's, unique like any other; a caller that needs all or nothing
    drops them (a gap, never a duplicate).
    """

    ids: list[int]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.ids = []


class APIError(IdmintError):
    """An error answer of an instance: HTTP status, stable code, message."""

    def __init__(self, url: str, status: int, code: str, message: str, tag: str = "") -> None:
        self.url, self.status, self.code, self.message, self.tag = url, status, code, message, tag
        text = message
        if tag and f'"{tag}"' not in text:
            text = f'biz_tag "{tag}": {text}'
        super().__init__(f"idmint {url}: {status} {code}: {text}")

    @property
    def final(self) -> bool:
        """True for a refusal of the request itself: a 4xx but 408 and 429."""
        return 400 <= self.status < 500 and self.status not in (408, 429)

    @property
    def not_ours(self) -> bool:
        """True when the request ID is settled without a range for us."""
        return self.code in ("not_holder", "request_conflict", "given_back")


class Refused(APIError):
    """A final refusal (400, 401, 403, 404): never retried."""


class InvalidRequest(Refused):
    """400: the request is not valid (code says which field)."""


class InvalidTag(InvalidRequest):
    """400 invalid_biz_tag: the tag is not a valid name."""


class Unauthorized(Refused):
    """401: no token, or an unknown or revoked one."""


class Forbidden(Refused):
    """403: the token's scopes do not cover the tag (the message names the scope)."""


class UnknownTag(Refused):
    """404 unknown_tag: the instances do not know the tag."""


class Unavailable(IdmintError):
    """No ID could be handed out in time: both ranges of the tag are empty
    and no instance granted a new one (down, unreachable, 503, 429).

    ``code`` is the last instance's stable code when one answered (for
    example ``tag_exhausted``, which needs an operator), else ``""``;
    ``cause`` the last error seen.
    """

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.code = cause.code if isinstance(cause, APIError) else ""


class ClosedError(IdmintError):
    """The client was closed."""


class SharesOverlap(IdmintError):
    """Two of the client's regions sent shares of the ID space that may
    overlap, or a region's reply came from a database of another region or
    of none: the client may have been given the same ID by two regions. It
    hands out no ID from then on (a gap, never a duplicate) and every call
    raises this error at once. It is final, never worth a retry (not
    Unavailable): the deployment's shares must be fixed (docs/regions.md)."""


def refusal(url: str, status: int, code: str, message: str, tag: str = "") -> APIError:
    """Returns the typed error of an instance's answer."""
    cls: type[APIError] = APIError
    if status == 401:
        cls = Unauthorized
    elif status == 403:
        cls = Forbidden
    elif status == 404 and code == "unknown_tag":
        cls = UnknownTag
    elif status == 400 and code == "invalid_biz_tag":
        cls = InvalidTag
    elif status == 400:
        cls = InvalidRequest
    elif 400 <= status < 500 and status not in (408, 429):
        cls = Refused
    return cls(url, status, code, message, tag)
