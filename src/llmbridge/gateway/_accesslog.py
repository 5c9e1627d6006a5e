"""The access log off the request's path: lines written once per event-loop turn, not per request.

uvicorn logs one access line per response through a plain ``StreamHandler``, which writes
and flushes (a system call each) while the request's first bytes wait behind it. This
handler formats the line as before (same formatter, same :class:`~._server.RedactSecrets`
filter, same text) but only queues it; everything queued in one turn of the event loop is
written in one call at the end of the turn. Outside a running loop (start-up, shutdown,
another thread) a line is written at once, and :meth:`flush` (``logging.shutdown`` calls it
at exit) writes whatever is still queued.
"""

from __future__ import annotations

import asyncio
import http
import logging
from typing import Any

from uvicorn.logging import AccessFormatter

__all__ = ["BatchedStreamHandler", "PlainAccessFormatter"]

_PHRASES = {status.value: status.phrase for status in http.HTTPStatus}
UVICORN_ACCESS_FORMAT = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'


class PlainAccessFormatter(AccessFormatter):
    """uvicorn's access formatter, its uncoloured line made in one f-string: the same text
    (``tests/test_gateway_overhead.py`` compares them) without two copies of the record and
    an ``HTTPStatus`` lookup per request. Coloured output, another format or other arguments
    go to uvicorn's own code."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        args = record.args
        if self.use_colors or self._fmt != UVICORN_ACCESS_FORMAT or not isinstance(args, tuple) or len(args) != 5:
            return super().formatMessage(record)
        client, method, path, version, status = args
        code = int(status)  # type: ignore[call-overload]  # (uvicorn logs an int)
        level = record.levelname
        prefix = f"{level}:{' ' * (8 - len(level))}"
        return f'{prefix} {client} - "{method} {path} HTTP/{version}" {code} {_PHRASES.get(code, "")}'


class BatchedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A ``StreamHandler`` that writes the lines of one event-loop turn together."""

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._scheduled = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: as a StreamHandler would
            self._lines.append(line)
            self.flush()
            return
        self._lines.append(line)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self.flush)

    def flush(self) -> None:
        self.acquire()
        self._scheduled = False
        lines, self._lines = self._lines, []
        try:
            if lines and self.stream is not None:
                self.stream.write("".join(lines))
            if self.stream is not None and hasattr(self.stream, "flush"):
                self.stream.flush()
        except Exception:  # a closed or broken stream: logging's own policy (stderr note), never raise
            if lines:
                self.handleError(logging.makeLogRecord({"msg": "access log write failed"}))
        finally:
            self.release()
