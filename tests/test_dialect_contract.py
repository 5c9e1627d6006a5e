"""One contract, every dialect: what ``dialects/__init__.py`` and ``dialects/_contracts.py`` promise.

For each of the nine dialects: the module surface; decoders and encoders satisfy the
protocols; any split of a body (corpus captures and our own encoder's output) decodes to
the same events; garbage never raises; an encoded hub stream decodes back to a valid one
with the same content; the encoder rules at the edges (after the end, not a hub event);
and every violation rule a decoder can report is named in ``dialects.rules``.
Dialect-specific behaviour stays in each dialect's own test module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmbridge import dialects, hub
from llmbridge.dialects import rules
from llmbridge.dialects.base import (
    DialectModule,
    StreamDecoder,
    StreamEncoder,
    encode_all,
    missing_surface,
)
from tests.conftest import CORPUS, ROOT, corpus_files
from tests.strategies import garbage, hub_streams, split, splits

ALL = dialects.NAMES + dialects.MORE_NAMES


def _corpus(name: str) -> list[Path]:
    """The real captures of dialect ``name`` (llm-stream: the draft's seed example)."""
    if name == "llm-stream":
        return sorted((ROOT / "tests" / "data" / "llm-stream").glob("*.sse"))
    if name == "gemini":
        return corpus_files("gemini") + sorted((CORPUS / "other").glob("gemini*json-array-stream*.sse"))
    if (CORPUS / name).is_dir():
        return corpus_files(name)
    suffix = ".eventstream" if name == "bedrock-converse" else ".sse"
    return [p for p in corpus_files("other", suffix=suffix) if p.name.startswith(f"{name}-")]


CORPUS_CASES = [(name, p) for name in ALL for p in _corpus(name)]  # every dialect but mmsp has some


def decode(name: str, chunks: list[bytes]) -> tuple[list[hub.Event], list[hub.Violation]]:
    decoder = dialects.get(name).StreamDecoder()
    events: list[hub.Event] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.close(), decoder.violations


def encode(name: str, events: list[hub.Event]) -> bytes:
    return encode_all(dialects.get(name).StreamEncoder(), events)


# --------------------------------------------------------------------------- surface


@pytest.mark.parametrize("name", ALL)
def test_module_has_the_whole_surface(name):
    module = dialects.get(name)
    assert missing_surface(module) == []
    assert name == module.NAME
    assert isinstance(module.StreamDecoder(), StreamDecoder)
    assert isinstance(dialects.stream_encoder(module, hub.Request()), StreamEncoder)
    typed: DialectModule = module  # what mypy checks statically, here for the record
    assert typed.STREAM_CONTENT_TYPE


def test_every_dialect_has_real_captures_but_mmsp():
    # mmsp has no public captures; its own tests use the mmsp package's recordings.
    assert {name for name, _ in CORPUS_CASES} == set(ALL) - {"mmsp"}


# --------------------------------------------------------------------------- decoders


@pytest.mark.parametrize(("name", "path"), CORPUS_CASES, ids=[f"{n}:{p.stem}" for n, p in CORPUS_CASES])
@given(cuts=splits)
def test_any_split_of_a_capture_gives_the_same_events(name, path, cuts):
    body = path.read_bytes()
    assert decode(name, split(body, cuts)) == decode(name, [body])


@pytest.mark.parametrize("name", ALL)
@given(events=hub_streams(), cuts=splits)
def test_any_split_of_our_own_output_gives_the_same_events(name, events, cuts):
    body = encode(name, events)
    assert decode(name, split(body, cuts)) == decode(name, [body])


@pytest.mark.parametrize("name", ALL)
@given(data=garbage, cuts=splits)
def test_garbage_never_raises_and_still_ends_the_stream(name, data, cuts):
    events, violations = decode(name, split(data, cuts))
    assert events and type(events[-1]) is hub.ResponseEnd  # a decoder always ends the hub stream
    assert all(type(v) is hub.Violation for v in violations)
    # the hub grammar may only be broken at the start (a body that never opened the stream)
    assert all(v.rule in ("start-first", "blocks-closed") for v in hub.validate(events)), hub.validate(events)


# --------------------------------------------------------------------------- encode -> decode


def _content(events: list[hub.Event]) -> tuple:
    """What every dialect keeps: the non-empty blocks' (choice, kind, text), finish reasons by
    choice, whether it completed, and the error type (the rest is dialect-specific)."""
    r = hub.assemble(events)
    blocks = sorted((b.choice, b.kind, b.text) for b in r.blocks if b.text)
    error = r.error.type if r.error is not None else None
    return blocks, {c: f.reason for c, f in r.finishes.items()}, r.complete, error


@pytest.mark.parametrize("name", ALL)
@given(events=hub_streams())
def test_an_encoded_hub_stream_decodes_back(name, events):
    assert hub.validate(events) == []
    again, violations = decode(name, [encode(name, events)])
    assert hub.validate(again) == []
    if hub.assemble(events).error is None:
        assert violations == []
        assert _content(again) == _content(events)
    else:  # what came before the error is the dialect's business; that it failed, and how, is not
        assert not hub.assemble(again).complete
        assert _content(again)[3] == _content(events)[3]


# --------------------------------------------------------------------------- encoder edges

ANY_EVENT = [
    hub.ResponseStart(),
    hub.BlockStart(7, "text"),
    hub.Delta(7, "late"),
    hub.BlockStop(7),
    hub.Usage(1, 2),
    hub.Finish("end_turn"),
    hub.Extension("gemini", {}),
    hub.Error("late"),
    hub.ResponseEnd(),
]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("ending", [hub.ResponseEnd(), hub.Error("boom")], ids=["end", "error"])
def test_after_the_end_every_encoder_writes_nothing(name, ending):
    encoder = dialects.get(name).StreamEncoder()
    assert encoder.encode(hub.ResponseStart()) is not None
    assert encoder.encode(ending)  # the terminal event (after an error: error event + terminal)
    assert [encoder.encode(e) for e in ANY_EVENT] == [b""] * len(ANY_EVENT)
    assert encoder.encode(object()) == b""  # the wire is closed: nothing is checked any more


@pytest.mark.parametrize("name", ALL)
def test_every_encoder_refuses_what_is_not_a_hub_event(name):
    encoder = dialects.get(name).StreamEncoder()
    encoder.encode(hub.ResponseStart())
    with pytest.raises(TypeError, match="not a hub event"):
        encoder.encode({"event": "Delta"})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ALL)
def test_codec_classes_say_their_terminal_rule_and_what_they_refuse(name):
    module = dialects.get(name)
    for codec in (module.StreamDecoder, module.StreamEncoder):
        doc = codec.__doc__ or ""
        assert "Terminal rule" in doc and "Refuses" in doc, f"{codec.__module__}.{codec.__qualname__}"


# --------------------------------------------------------------------------- named rules


def _reported_rules() -> dict[str, str]:
    """Every rule name passed as a literal to a violation-recording call in src/, with where."""
    found: dict[str, str] = {}
    calls = {"violation", "_violation", "_fatal", "Violation", "Problem"}
    for path in sorted((ROOT / "src" / "llmbridge").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name not in calls:
                continue
            for arg in node.args[:2]:  # Violation(event, rule, ...) or violation(rule, ...)
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and " " not in arg.value:
                    found.setdefault(arg.value, f"{path.relative_to(ROOT)}:{node.lineno}")
                    break
    return found


def test_every_reported_rule_is_named_with_a_meaning():
    reported = _reported_rules()
    assert len(reported) > 50  # the scan found the calls (a rename would otherwise pass silently)
    unnamed = {rule: where for rule, where in reported.items() if rule not in rules.RULES}
    assert unnamed == {}, "add these to dialects/rules.py with a one-line meaning"
    assert all(meaning and "\n" not in meaning for meaning in rules.RULES.values())


def test_one_break_has_one_name():
    retired = {"chunk-object", "event-shape"}  # both are JSON_OBJECT now
    assert not retired & set(_reported_rules()) and not retired & set(rules.RULES)


@given(st.sampled_from(ALL))
def test_decoders_report_only_named_rules_on_garbage(name):
    _, violations = decode(name, [b'data: {"x":1}\n\ndata: [1]\n\ndata: nope\n\n'])
    assert {v.rule for v in violations} <= set(rules.RULES)


def _factory_by_getattr(module: object, request: object) -> object:
    """dialects.stream_encoder as it was: getattr for the optional factory."""
    factory = getattr(module, "stream_encoder", None)
    return factory(request) if factory is not None else module.StreamEncoder()  # type: ignore[attr-defined]


def test_stream_encoder_reads_the_factory_as_getattr_does():
    import types

    request = hub.Request(stream=True)
    made: list[object] = []

    def factory(req: object) -> object:
        made.append(req)
        return ("made", req)

    plain = types.ModuleType("plain")
    plain.StreamEncoder = lambda: "default"  # type: ignore[attr-defined]
    with_factory = types.ModuleType("with_factory")
    with_factory.StreamEncoder = plain.StreamEncoder  # type: ignore[attr-defined]
    with_factory.stream_encoder = factory  # type: ignore[attr-defined]
    lazy = types.ModuleType("lazy")  # a module __getattr__ (PEP 562) that supplies the factory
    lazy.StreamEncoder = plain.StreamEncoder  # type: ignore[attr-defined]

    def lazy_attr(name: str) -> object:
        if name == "stream_encoder":
            return factory
        raise AttributeError(name)

    lazy.__getattr__ = lazy_attr  # type: ignore[attr-defined]

    class Module(types.ModuleType):  # a module subclass: its class attribute counts for getattr
        stream_encoder = staticmethod(factory)

    subclassed = Module("subclassed")
    subclassed.StreamEncoder = plain.StreamEncoder  # type: ignore[attr-defined]
    namespace = types.SimpleNamespace(StreamEncoder=plain.StreamEncoder, stream_encoder=factory)
    bare = types.SimpleNamespace(StreamEncoder=plain.StreamEncoder)
    for module in (plain, with_factory, lazy, subclassed, namespace, bare):
        assert dialects.stream_encoder(module, request) == _factory_by_getattr(module, request)  # type: ignore[arg-type]
    for name in dialects.NAMES + dialects.MORE_NAMES:
        module = dialects.get(name)
        fast, general = dialects.stream_encoder(module, request), _factory_by_getattr(module, request)
        assert type(fast) is type(general) and vars(fast).keys() == vars(general).keys()
