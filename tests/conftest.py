"""Shared fixtures: the corpus of real provider streams, deterministic hypothesis."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from llmbridge.gateway.upstream import LOCAL_EXTRA_HINT, local_available

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"  # the real-stream captures travel with the repository

_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large]
# `make test`: fast and the same on every run (the examples derive from each test's source).
settings.register_profile("default", derandomize=True, max_examples=25, deadline=None,
                          suppress_health_check=_SLOW_IS_FINE)
settings.register_profile("thorough", max_examples=500, deadline=None, suppress_health_check=_SLOW_IS_FINE)
# `make test-deep`: random examples, thousands of them (HYPOTHESIS_EXAMPLES), from the seed the
# Makefile draws and prints (pass SEED=... to replay a run).  No example database: a finding is
# replayed by its seed, and the suite leaves nothing behind.
settings.register_profile(
    "deep",
    derandomize=False,
    max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "2000")),
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=_SLOW_IS_FINE,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def corpus_files(dialect: str | None = None, suffix: str = ".sse") -> list[Path]:
    """Corpus bodies, for one dialect folder or all; fails loudly when the corpus is missing."""
    if not CORPUS.is_dir():
        raise RuntimeError(f"corpus not found at {CORPUS}")
    folders = [CORPUS / dialect] if dialect else sorted(p for p in CORPUS.iterdir() if p.is_dir())
    return sorted(f for folder in folders for f in folder.iterdir() if f.name.endswith(suffix))


def require_local_model() -> None:
    """Skip the calling test module when the embedded model's extra is not installed."""
    if not local_available():
        pytest.skip(f"the embedded local model is not installed ({LOCAL_EXTRA_HINT})", allow_module_level=True)
