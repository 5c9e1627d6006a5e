"""Shared fixtures: the corpus of real provider streams, deterministic hypothesis."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from llmbridge.gateway._upstream import LOCAL_EXTRA_HINT, local_available

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"  # the real-stream captures travel with the repository

_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large]
# `make test`: fast and the same on every run (the examples derive from each test's source).
settings.register_profile(
    "default", derandomize=True, max_examples=25, deadline=None, suppress_health_check=_SLOW_IS_FINE
)
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


# --------------------------------------------------------------------------- components and the fast tier
#
# Every test module belongs to one component (its marker, from the module's name), so one part
# can be run alone: `pytest -m codecs`, `-m gateway`, `-m teams`, `-m client`, `-m local`,
# `-m clients` (real third-party clients and coding agents). The codec modules are also the
# fast tier (`make test-fast`, marker `fast`): sans-I/O tests that open no socket, which the
# guard below enforces rather than trusts: connecting, binding or listening fails the test.

COMPONENTS = {
    "codecs": (
        "test_sse", "test_hub", "test_openai_chat", "test_openai_chat_hot_path", "test_openai_responses",
        "test_anthropic_messages", "test_gemini", "test_llm_stream", "test_more_dialects", "test_accept_requests",
        "test_unievent", "test_dialect_contract", "test_dialect_layout", "test_finish_maps", "test_extension_key",
        "test_matrix", "test_bindings", "test_media", "test_request_fields", "test_public_api", "test_extras",
    ),
    # (test_mmsp and test_media_data_path check codecs through a running gateway too)
    "gateway": ("test_gateway_", "test_pipeline", "test_routing", "test_response", "test_count_tokens", "test_http",
                "test_ui", "test_bindings_gateway", "test_conformance", "test_vendor_schemas", "test_mmsp",
                "test_media_data_path"),
    "teams": ("test_teams",),
    "client": ("test_client", "test_cli", "test_docs", "test_mypy_baseline"),
    "local": ("test_local",),
    "clients": ("test_third_party", "test_coding_agents"),
}  # fmt: skip
FAST = "codecs"


def component_of(module: str) -> str | None:
    """The component of a test module (its name without the package): the codecs by exact
    name (the fast tier admits no module by accident), the others by their longest prefix."""
    if module in COMPONENTS[FAST]:
        return FAST
    found = [(len(p), n) for n, ms in COMPONENTS.items() if n != FAST for p in ms if module.startswith(p)]
    return max(found)[1] if found else None


def pytest_configure(config: pytest.Config) -> None:
    for name in COMPONENTS:
        config.addinivalue_line("markers", f"{name}: the {name} component's tests")
    config.addinivalue_line("markers", "fast: the fast tier (sans-I/O, no socket): make test-fast")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module is not None else ""
        component = component_of(module)
        if component is not None:
            item.add_marker(component)
            if component == FAST:
                item.add_marker("fast")


@pytest.fixture(autouse=True)
def _fast_tier_opens_no_socket(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("fast") is None:
        return
    import socket

    def refuse(self: socket.socket, *args: object) -> None:
        raise AssertionError("a fast-tier (sans-I/O) test opened a network connection")

    for method in ("connect", "connect_ex", "bind", "listen"):
        monkeypatch.setattr(socket.socket, method, refuse)


@pytest.fixture
def no_collector_pause() -> Iterator[None]:
    """The cyclic collector off for the test (after one collection), for tests that time a
    gateway served in this process against a clock: keep-alive intervals, idle deadlines.

    The gateway runs in a thread of the test process, and a full collection of that process
    holds the GIL throughout: late in the suite it walks ~800,000 objects for up to 0.73 s
    on this 2-core machine (measured with ``gc.callbacks`` over a whole run), long enough to
    swallow every keep-alive of a one-second stall. A served gateway never pauses so:
    ``llmbridge serve`` freezes its start-up heap (``freeze_startup_objects``), and its
    requests leave no cycles (``tests/test_gateway_overhead.py``)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
