"""Issue 23, the cost of starting a request: the shortcuts the pipeline and the upstream
exchange take on the usual path, each checked against the general path it skips."""

from __future__ import annotations

import itertools
import json

import pytest

from llmbridge.gateway import config
from llmbridge.gateway._checks import nesting_exceeds
from llmbridge.gateway._pipeline import Pipeline, Refused
from llmbridge.gateway._traffic import TrafficLog


def _pipeline(depth: int) -> Pipeline:
    return Pipeline(config.parse({"gateway": {"max_json_depth": depth}}), {}, None, TrafficLog(0))


def _bodies(depth: int) -> list[str]:
    """JSON texts nested up to ``depth`` levels, compact and spaced: the shortest ones that
    reach each depth (where the size bound is tight) and some with text beside them."""
    out = []
    for n in range(1, depth + 1):
        for opens in itertools.product("[{", repeat=n):
            text = ""
            for o in reversed(opens):
                text = f"[{text}]" if o == "[" else '{"k":' + (text or "0") + "}"
            out += [text, '{"a":' + text + "}", '{"a": "[[[[{{{{", "b": ' + text + "}"]
    return out


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5])
def test_check_object_size_bound_agrees_with_the_walk(limit: int) -> None:
    """A body too short to nest deeper than ``max_json_depth`` is not walked: the outcome
    (accepted, too deep, not an object) is the walk's for every body, at every size."""
    p = _pipeline(limit)
    for text in _bodies(limit + 2):
        raw = text.encode()
        body = json.loads(raw)

        def outcome(size: int | None, body: object = body) -> str:
            try:
                p.check_object(body, size)
            except Refused as exc:
                return exc.error.message
            return "ok"

        general = outcome(None)
        assert outcome(len(raw)) == general, text
        assert (general == p._too_deep().error.message) == nesting_exceeds(body, limit), text


def test_the_shortest_body_past_the_limit_is_refused() -> None:
    """limit + 1 levels in exactly 2 * (limit + 1) bytes: at the bound, walked and refused."""
    p = _pipeline(3)
    with pytest.raises(Refused, match="more than 3 levels"):
        p.check_object(json.loads("[[[[]]]]"), 8)
    assert p.check_object(json.loads('{"a":[[]]}'), 10) == {"a": [[]]}


async def test_keyless_callers_share_frozen_principals_and_one_admission() -> None:
    """A request without a virtual key gets the shared principal of its kind (frozen: nothing
    a request does can change it for the next) and the shared ADMITTED admission, which
    settling reads and never changes."""
    from llmbridge import hub
    from llmbridge.gateway._teams import AS_OPEN, AS_STATIC, STATIC, Principal, Teams
    from llmbridge.gateway._teams.limits import ADMITTED, Admission

    cfg = config.parse({"gateway": {"api_keys": ["k1"]}, "models": []})
    teams = Teams(cfg.gateway.teams, cfg, [b"k1"])
    assert await teams.authenticate("k1") is AS_STATIC == Principal(STATIC)
    assert await _pipeline(3).authenticate(_Connection()) is AS_OPEN  # (no keys configured)
    ticket = await teams.admit(AS_STATIC, hub.Request(model="m"), 10, "openai-chat", "openai-chat", "r1")
    assert not isinstance(ticket, Refused) and ticket.admission is ADMITTED
    teams.settle(ticket, 200)
    assert Admission(True) == ADMITTED
    with pytest.raises(AttributeError):
        AS_STATIC.kind = "master"  # type: ignore[misc]


class _Connection:
    scope: dict[str, object] = {"client": ("127.0.0.1", 1)}
    headers: dict[str, str] = {}


def test_turn_and_options_fields_are_in_the_order_chat_passes_them() -> None:
    """Chat.handle makes its Turn and Chat.start its exchange Options positionally (keywords
    cost ~0.4 k instructions each to bind, per request): a field moved or added in between
    must move those calls too (several neighbours share a type, so mypy alone would not see it)."""
    import dataclasses

    from llmbridge.gateway._chat import Turn
    from llmbridge.gateway._streaming import Options

    handle_passes = ["request", "request_dialect", "out_dialect", "size", "json_array", "binary", "with_extensions"]
    handle_passes += ["request_id", "body", "headers", "arrived"]
    assert [f.name for f in dataclasses.fields(Turn)][: len(handle_passes)] == handle_passes
    start_passes = ("dialect", "relay", "relay_filter", "keepalive", "json_array", "request_id", "max_event_bytes")
    assert Options._fields == (*start_passes, "observer", "on_end", "model")


async def test_route_plans_with_the_request_deadline_and_size() -> None:
    """Pipeline.route hands the router its deadline and the body's size positionally: the
    plan holds the first deployment's total timeout from now and the size's token estimate."""
    import math

    from llmbridge.gateway._routing import _TOKENS_PER_BYTE
    from llmbridge.gateway._upstream import build

    raw = {
        "upstreams": {"u": {"format": "openai-chat", "base_url": "http://127.0.0.1:9/v1", "timeouts": {"total": 77}}},
        "models": [{"name": "m", "upstream": "u"}],
    }
    cfg = config.parse(raw)
    p = Pipeline(cfg, {"u": build(cfg.upstreams["u"])}, None, TrafficLog(0))
    seen = []

    async def attempt(a):  # type: ignore[no-untyped-def]
        seen.append((a.plan.deadline - p.router.clock(), a.plan.estimate))
        return "ok"

    assert (await p.route(cfg.models["m"], attempt, body_bytes=4000))[0] == "ok"
    ((left, estimate),) = seen
    assert 76 < left <= 77 and estimate == math.ceil(4000 * _TOKENS_PER_BYTE) != 77


async def test_upstream_sends_with_its_connect_and_first_byte_timeouts() -> None:
    """HTTPUpstream passes the client its timeouts positionally: connect, then the head's
    (the first-byte timeout), not the other way round."""
    from llmbridge.gateway._failures import UpstreamFailed
    from llmbridge.gateway._http import HTTPClient
    from llmbridge.gateway._upstream import HTTPUpstream

    raw = {"upstreams": {"u": {"format": "openai-chat", "base_url": "http://127.0.0.1:9/v1"}}}
    raw["upstreams"]["u"]["timeouts"] = {"connect": 3, "first_byte": 44}
    cfg = config.parse({**raw, "models": [{"name": "m", "upstream": "u"}]})
    seen = []

    class Client:
        async def send(self, head, body, connect_timeout=None, head_timeout=None):  # type: ignore[no-untyped-def]
            seen.append((connect_timeout, head_timeout))
            raise OSError("no")

    upstream = HTTPUpstream(cfg.upstreams["u"], Client())  # type: ignore[arg-type]
    with pytest.raises(UpstreamFailed):
        await upstream._send(HTTPClient().head("POST", "http://127.0.0.1:9/v1/x", {}), b"{}")
    assert seen == [(3, 44)]


def test_the_left_out_extension_is_logged_at_info_only(caplog: pytest.LogCaptureFixture) -> None:
    """A request translated from Anthropic Messages carries our block-order extension at the
    top of its body: it is left out of an openai-chat upstream's body either way, and the INFO
    line saying so is written when INFO is on (and only then made)."""
    import logging

    from llmbridge import dialects
    from llmbridge.dialects.base import EXTENSION_KEY
    from llmbridge.gateway._upstream import HTTPUpstream

    cfg = config.parse({"upstreams": {"u": {"format": "openai-chat", "base_url": "http://127.0.0.1:9/v1"}}})
    upstream = HTTPUpstream(cfg.upstreams["u"])
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    hreq = dialects.get("anthropic-messages").decode_request(body)
    assert EXTENSION_KEY in dialects.get("openai-chat").encode_request(hreq)  # (what is left out)
    for level, logged in ((logging.WARNING, False), (logging.INFO, True)):
        caplog.clear()
        caplog.set_level(level, "llmbridge.gateway")
        assert EXTENSION_KEY.encode() not in upstream.request_bytes(hreq)
        assert ("has no field for llmbridge: left out" in caplog.text) is logged


def test_the_request_copy_is_dataclasses_replace() -> None:
    """Chat.start copies the client's hub request (copy_request) by passing its fields to the
    constructor by position: every field must be an ``__init__`` argument, none a
    ``__post_init__`` input, and the copy must equal ``dataclasses.replace``'s, sharing the
    same values (a shallow copy), with every field set to something other than its default."""
    import dataclasses

    from llmbridge import hub
    from llmbridge.gateway._chat import copy_request

    fields = dataclasses.fields(hub.Request)
    assert all(f.init for f in fields) and not hasattr(hub.Request, "__post_init__")
    values: dict[str, object] = {}
    for f in fields:  # a distinct, non-default value per field
        values[f.name] = object()
        assert values[f.name] != f.default
    original = hub.Request(**values)  # type: ignore[arg-type]
    copy = copy_request(original)
    assert copy is not original
    assert vars(copy) == vars(dataclasses.replace(original)) == values
    for name, value in values.items():
        assert getattr(copy, name) is value  # (the same objects: shallow)
    copy.model = "other"
    assert original.model is values["model"]
