"""Megabyte buffers from the heap, not from fresh ``mmap`` calls (glibc's ``mallopt``).

Why: an image event is ~1 MB of base64, and on its way through the gateway it is held in a
few fresh buffers (the socket reads joined into one event; on the translated path also its
JSON string, the ASCII bytes and the client's event). glibc serves every allocation above
its mmap threshold (128 KiB, then moving up and down with what was freed) with a fresh
``mmap`` and returns it with ``munmap``, and it gives the heap's top back to the kernel past
the trim threshold: each such megabyte then costs 256 page faults and the kernel zeroing the
pages, about ten times the copy itself. Measured (``python -m bench images``, the same run):
the Gemini → Images API translation of one 1 MB image fell from ~6 to ~1.4 ms of CPU in
process with the thresholds fixed, and the served figures are in bench/README.md.

The cost: memory the gateway freed stays in its heap, up to :data:`TRIM` bytes above what
is in use, instead of going back to the kernel at once (RSS after a burst of images stays
higher by up to that much). Allocations above :data:`MMAP` (32 MiB, glibc's largest allowed
value) are still mapped and unmapped on their own.

Applied once per process (``gateway/_server.py``), only on glibc, and only when the operator
has not set glibc's own ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` (theirs win)
nor ``LLMBRIDGE_HEAP=system`` (glibc's defaults, untouched).
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["MMAP", "TRIM", "keep_large_buffers_on_heap"]

MMAP = 32 * 1024 * 1024  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the most mallopt accepts
TRIM = 64 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def keep_large_buffers_on_heap() -> bool:
    """Fix glibc's mmap and trim thresholds (see the module docstring); whether it was done.

    Does nothing (``False``) off Linux, without glibc's ``mallopt``, when the environment
    sets either threshold already, or with ``LLMBRIDGE_HEAP=system``. Never raises.
    """
    if not sys.platform.startswith("linux"):
        return False
    env = os.environ
    if "MALLOC_MMAP_THRESHOLD_" in env or "MALLOC_TRIM_THRESHOLD_" in env or env.get("LLMBRIDGE_HEAP") == "system":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no C library symbols to look at, or not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # (musl has a mallopt that does nothing and returns 0)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM))
