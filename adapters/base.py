"""What every platform adapter is: verify, parse to events, render and send replies.

Errors (raised by adapters, mapped to HTTP statuses by the gateway):

    AdapterError
    ├── BadRequest       the body is not what the platform sends (400)
    ├── Unauthorized     signature, secret or token missing or wrong (401)
    ├── Forbidden        authenticated, but not allowed here (403)
    └── RateLimited      the platform asked us to wait ``retry_after`` seconds
"""

from __future__ import annotations


class AdapterError(Exception):
    """Base class of adapter errors."""


class BadRequest(AdapterError):
    """The request body is malformed or misses a required field."""


class Unauthorized(AdapterError):
    """The request is not authentic: bad or missing signature, secret or token."""


class Forbidden(AdapterError):
    """The caller is authentic but may not use this route from where it is."""


class RateLimited(AdapterError):
    """The platform refused a call for now; retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(retry_after)
        self.retry_after = retry_after
