"""Virtual keys: secrets, their hashes, records and the admin API's input rules (pure, no I/O).

A secret is ``sk-llmb-`` + 32 random bytes (urlsafe base64) from :mod:`secrets`. Only its
SHA-256 is stored: with 256 bits of entropy a fast hash is enough (no dictionary to attack),
and it keeps the per-request lookup a dict hit instead of a deliberately slow KDF.
"""

from __future__ import annotations

import calendar
import hashlib
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from ...dialects.base import json_encode

__all__ = [
    "KeyInputError",
    "KeyRecord",
    "MAX_BUDGET",
    "MAX_METADATA_BYTES",
    "MAX_MODELS",
    "MAX_RPM",
    "MAX_TPM",
    "PERIODS",
    "PREFIX",
    "create",
    "hash_secret",
    "new_id",
    "new_secret",
    "parse_since",
    "period_end",
    "period_start",
    "rfc3339",
    "rotate",
    "update",
]

PREFIX = "sk-llmb-"
PERIODS = ("day", "month", "total")
MAX_RPM = 10_000_000
MAX_TPM = 100_000_000_000
MAX_BUDGET = 1_000_000_000.0
MAX_MODELS = 1000
MAX_METADATA_BYTES = 16 * 1024
MAX_TIMESTAMP = 253402300799.0  # 9999-12-31T23:59:59Z: the last second rfc3339() can write
_FIELDS = (
    "name", "models", "rpm_limit", "tpm_limit", "budget_usd", "budget_period", "expires_at", "metadata",
    "response_store", "cache",
)  # fmt: skip


class KeyInputError(ValueError):
    """A malformed admin request; the message says which field and why (a 400)."""


def new_secret() -> str:
    """A fresh client secret (shown once, never stored)."""
    return PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str | bytes) -> str:
    """The stored form of a secret (text, or its UTF-8 bytes): hex SHA-256."""
    return hashlib.sha256(secret.encode() if isinstance(secret, str) else secret).hexdigest()


def new_id() -> str:
    return "key_" + secrets.token_hex(8)


@dataclass(frozen=True)
class KeyRecord:
    """One virtual key as stored (``key_hash``, never the secret)."""

    id: str
    name: str
    key_hash: str
    key_prefix: str  # the first characters of the secret, so people can tell their keys apart
    models: tuple[str, ...] | None = None  # None: every model
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    budget_usd: float | None = None
    budget_period: str = "total"
    expires_at: float | None = None  # epoch seconds
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float = 0.0
    revoked_at: float | None = None
    # false forces `store = false` on /v1/responses for this key (docs/gateway.md, "Stored responses")
    response_store: bool = True
    cache: bool = True  # false: this key's requests never read or fill a model's response cache

    def usable(self, now: float) -> str | None:
        """Why the key cannot be used at ``now`` (revoked, expired), or None."""
        if self.revoked_at is not None:
            return "this API key has been revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "this API key has expired"
        return None

    def public(self) -> dict[str, Any]:
        """The admin API's JSON for the key (no hash, no secret)."""
        return {
            "id": self.id,
            "name": self.name,
            "key_prefix": self.key_prefix,
            "models": list(self.models) if self.models is not None else None,
            "rpm_limit": self.rpm_limit,
            "tpm_limit": self.tpm_limit,
            "budget_usd": self.budget_usd,
            "budget_period": self.budget_period,
            "expires_at": rfc3339(self.expires_at),
            "metadata": self.metadata,
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
            "revoked": self.revoked_at is not None,
            "revoked_at": rfc3339(self.revoked_at),
            "response_store": self.response_store,
            "cache": self.cache,
        }


def create(body: Any, now: float | None = None) -> tuple[KeyRecord, str]:
    """A new key from a ``POST /admin/keys`` body: the record and its secret.

    Raises :class:`KeyInputError` for anything malformed.
    """
    if not isinstance(body, dict):
        raise KeyInputError("the body must be a JSON object")
    if "name" not in body:
        raise KeyInputError("name: required")
    fields = _validate(body)
    now = time.time() if now is None else now
    secret = new_secret()
    record = KeyRecord(
        id=new_id(),
        key_hash=hash_secret(secret),
        key_prefix=secret[: len(PREFIX) + 4],
        created_at=now,
        updated_at=now,
        **fields,
    )
    return record, secret


def update(record: KeyRecord, body: Any, now: float | None = None) -> KeyRecord:
    """``record`` with a ``PATCH /admin/keys/{id}`` body applied (``null`` clears a limit)."""
    if not isinstance(body, dict) or not body:
        raise KeyInputError("the body must be a JSON object with at least one field")
    fields = _validate(body)
    return replace(record, updated_at=time.time() if now is None else now, **fields)


def rotate(record: KeyRecord, now: float | None = None) -> tuple[KeyRecord, str]:
    """A new secret for the same key (id, limits, usage); the old secret stops working."""
    secret = new_secret()
    now = time.time() if now is None else now
    return replace(record, key_hash=hash_secret(secret), key_prefix=secret[: len(PREFIX) + 4], updated_at=now), secret


def _validate(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in body.items():
        if name not in _FIELDS:
            raise KeyInputError(f"{name}: unknown field; known: {', '.join(_FIELDS)}")
        out[name] = _CHECK[name](value)
    if out.get("budget_period") is None and "budget_period" in out:
        out["budget_period"] = "total"
    return out


def _name(v: Any) -> str:
    if not isinstance(v, str) or not v.strip() or len(v) > 200:
        raise KeyInputError("name: must be a non-empty string of at most 200 characters")
    return v


def _models(v: Any) -> tuple[str, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list) or len(v) > MAX_MODELS or not all(isinstance(m, str) and 0 < len(m) <= 256 for m in v):
        raise KeyInputError(
            f"models: must be a list of at most {MAX_MODELS} model names (1 to 256 characters), or null for all"
        )
    return tuple(v)


def _count(name: str, most: int) -> Callable[[Any], int | None]:
    def check(v: Any) -> int | None:
        if v is None:
            return None
        if type(v) is not int or not 1 <= v <= most:
            raise KeyInputError(f"{name}: must be an integer in [1, {most}], or null for no limit")
        return v

    return check


def _budget(v: Any) -> float | None:
    if v is None:
        return None
    # (an int is compared exactly: math.isfinite(10**400) would raise OverflowError)
    number = not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and math.isfinite(v)))
    if not number or not 0 <= v <= MAX_BUDGET:
        raise KeyInputError(f"budget_usd: must be a number of USD in [0, {MAX_BUDGET:g}], or null for no budget")
    return float(v)


def _period(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or v not in PERIODS:
        raise KeyInputError(f"budget_period: must be one of {', '.join(PERIODS)}")
    return v


def _expires(v: Any) -> float | None:
    if v is None:
        return None
    if not isinstance(v, str):
        raise KeyInputError("expires_at: must be an RFC 3339 date-time string like 2027-01-31T00:00:00Z, or null")
    try:
        when = datetime.fromisoformat(v)
    except ValueError:
        raise KeyInputError(f"expires_at: {_shown(v)} is not an RFC 3339 date-time") from None
    if when.tzinfo is None:
        raise KeyInputError("expires_at: needs a time zone (Z or +hh:mm)")
    t = _timestamp(when)
    if t is None or not 0 <= t <= MAX_TIMESTAMP:
        raise KeyInputError("expires_at: must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z")
    return t


def _timestamp(when: datetime) -> float | None:
    """``when`` as epoch seconds, or None when its UTC time is outside years 1..9999."""
    try:
        return when.timestamp()
    except (OverflowError, ValueError):
        return None


def _shown(value: str) -> str:
    """A client's string for an error message: quoted, at most 64 characters of it."""
    return repr(value) if len(value) <= 64 else repr(value[:64]) + "…"


def _metadata(v: Any) -> dict[str, Any]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise KeyInputError("metadata: must be a JSON object")
    if len(json_encode(v)) > MAX_METADATA_BYTES:
        raise KeyInputError(f"metadata: at most {MAX_METADATA_BYTES} bytes of JSON")
    return v


def _switch(name: str) -> Callable[[Any], bool]:
    def check(v: Any) -> bool:
        if v is None:
            return True
        if not isinstance(v, bool):
            raise KeyInputError(f"{name}: must be true or false")
        return v

    return check


_CHECK = {
    "name": _name,
    "models": _models,
    "rpm_limit": _count("rpm_limit", MAX_RPM),
    "tpm_limit": _count("tpm_limit", MAX_TPM),
    "budget_usd": _budget,
    "budget_period": _period,
    "expires_at": _expires,
    "metadata": _metadata,
    "response_store": _switch("response_store"),
    "cache": _switch("cache"),
}


def rfc3339(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def period_start(period: str, now: float) -> float:
    """Epoch seconds at which the budget period holding ``now`` began (UTC; 0 for "total")."""
    if period == "total":
        return 0.0
    # Asked twice per request of a key with a budget (admit, settle): kept per UTC day, which
    # decides both periods (epoch time has exactly 86,400 s a day), not worked out each time.
    key = (period, int(now // 86400))
    start = _PERIOD_STARTS.get(key)
    if start is None:
        tm = time.gmtime(now)
        if period == "day":
            start = float(calendar.timegm((tm.tm_year, tm.tm_mon, tm.tm_mday, 0, 0, 0)))
        else:
            start = float(calendar.timegm((tm.tm_year, tm.tm_mon, 1, 0, 0, 0)))
        if len(_PERIOD_STARTS) >= 64:
            _PERIOD_STARTS.clear()
        _PERIOD_STARTS[key] = start
    return start


_PERIOD_STARTS: dict[tuple[str, int], float] = {}


def period_end(period: str, now: float) -> float | None:
    """When the period holding ``now`` ends (None for "total"): the retry-after of a spent budget."""
    if period == "total":
        return None
    tm = time.gmtime(now)
    if period == "day":
        return period_start("day", now) + 86400
    year, month = (tm.tm_year + 1, 1) if tm.tm_mon == 12 else (tm.tm_year, tm.tm_mon + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


def parse_since(value: str, now: float | None = None) -> float:
    """``--since`` / ``?since=``: RFC 3339, a date (``2026-12-01``) or a span back (``24h``, ``7d``, ``30m``).

    Raises :class:`KeyInputError`.
    Any answer is clamped to [1970-01-01, 9999-12-31] UTC (a span longer than the epoch means
    "everything"); a span of more than nine digits is refused.
    """
    now = time.time() if now is None else now
    v = value.strip()
    units = {"m": 60, "h": 3600, "d": 86400}
    digits = v[:-1]
    if v[-1:] in units and digits.isascii() and digits.isdigit():
        if len(digits) > 9:
            raise KeyInputError(f"since: {_shown(value)}: a span has at most 9 digits (like 24h, 7d, 90d)")
        return min(max(0.0, now - int(digits) * units[v[-1]]), MAX_TIMESTAMP)
    try:
        when = datetime.fromisoformat(v)
    except ValueError:
        raise KeyInputError(f"since: {_shown(value)} is not a date, an RFC 3339 time or a span like 24h / 7d") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    t = _timestamp(when)
    if t is None:
        raise KeyInputError(f"since: {_shown(value)} is outside years 1..9999 (UTC)")
    return min(max(0.0, t), MAX_TIMESTAMP)
