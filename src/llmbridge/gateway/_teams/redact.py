"""Keep client keys out of access logs: ``?key=SECRET`` (Gemini's style) becomes ``?key=[redacted]``.

uvicorn's access log prints the path with its query string; a key passed as ``?key=`` would
land in every log line. :func:`install` adds a filter to the ``uvicorn.access`` logger that
rewrites that argument before any handler formats it.
"""

from __future__ import annotations

import logging
import re

__all__ = ["REDACTED", "RedactKeys", "install", "redact"]

_KEY_PARAM = re.compile(r"([?&](?:key|api_key|api-key)=)[^&#\s]*", re.IGNORECASE)
REDACTED = "[redacted]"


def redact(text: str) -> str:
    """``text`` with the values of ``key=``, ``api_key=`` query parameters replaced."""
    return _KEY_PARAM.sub(lambda m: m.group(1) + REDACTED, text) if "key" in text.lower() else text


class RedactKeys(logging.Filter):
    """Rewrites string arguments of a record that carry a key query parameter (never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple):
            for a in args:  # (a loop, not any() over a generator: every access log line comes here)
                if isinstance(a, str) and "key" in a.lower():
                    record.args = tuple(redact(x) if isinstance(x, str) else x for x in args)
                    break
        return True

    @staticmethod
    def redact_access(text: str) -> str:
        """What :meth:`filter` does to a string argument of an access line (gateway/_accesslog.py)."""
        return redact(text)


def install(logger_name: str = "uvicorn.access") -> None:
    """Add the filter to ``logger_name`` once (idempotent)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, RedactKeys) for f in logger.filters):
        logger.addFilter(RedactKeys())
