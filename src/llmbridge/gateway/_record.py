"""Recording upstream bodies (``[gateway] record_dir``) under names that cannot escape the directory."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import hub
from .config import UpstreamConfig

if TYPE_CHECKING:
    from ._streaming import Exchange

__all__ = ["Recorder", "confined", "safe_name"]

log = logging.getLogger("llmbridge.gateway")


class Recorder:
    """Writes one upstream response body to ``record_dir/<name>.sse`` plus a ``.json`` of facts."""

    def __init__(self, path: Path, meta: dict[str, Any]):
        self.path = path
        self.meta = meta
        self.parts: list[bytes] = []

    @classmethod
    def start(cls, directory: Path, number: int, upstream: UpstreamConfig, hreq: hub.Request) -> Recorder:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        name = safe_name(f"{stamp}-{number}-{upstream.name}-{hreq.model}")
        meta = {
            "dialect": upstream.format,
            "upstream": upstream.name,
            "model": hreq.model,
            "status": 200,
            "request_id": hreq.metadata.get("request_id"),
        }
        return cls(confined(directory, name + ".sse"), meta)

    def write(self, chunk: bytes) -> None:
        self.parts.append(chunk)

    def finish(self, exchange: Exchange) -> None:
        """Write the body and its facts (complete or not, the error); a failure is logged, not raised."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_bytes(b"".join(self.parts))
            meta = dict(
                self.meta,
                complete=exchange.ended and exchange.error is None,
                error=exchange.error.message if exchange.error else None,
            )
            self.path.with_suffix(".json").write_text(json.dumps(meta, indent=1))
        except OSError:
            log.exception("cannot record to %s", self.path)


def safe_name(text: str) -> str:
    """A file name that cannot leave its directory: ``[A-Za-z0-9._-]``, no leading dot, bounded."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).lstrip(".")[:150]
    return name or "unnamed"


def confined(directory: Path, name: str) -> Path:
    base = directory.resolve()
    path = (base / safe_name(name)).resolve()
    if path.parent != base:
        raise ValueError(f"{name!r} escapes {base}")
    return path
