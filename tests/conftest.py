"""Shared fixtures: the corpus of real provider streams, deterministic hypothesis."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from llmbridge.gateway.upstream import LOCAL_EXTRA_HINT, local_available

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"  # the real-stream captures travel with the repository

settings.register_profile(
    "default", derandomize=True, max_examples=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", max_examples=500, deadline=None)
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
