"""gateway/_hotpath.py: what its shortcuts assume of Starlette."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import Request

from llmbridge.gateway._hotpath import HotRequest, LookupHeaders, header_table


def test_the_hot_request_and_its_headers_are_starlettes_own_kinds():
    """HotRequest and LookupHeaders are Request's / Headers' subclasses, whose ``__init__``
    they do the work of themselves (tests/test_gateway_presend_cost.py holds them to it)."""
    assert HotRequest.__mro__[1] is Request and LookupHeaders.__mro__[1] is Headers


def test_a_hot_request_is_starlettes_request_with_the_same_headers():
    raw = [(b"content-type", b"application/json"), (b"x-dup", b"first"), (b"x-dup", b"second")]

    async def receive() -> dict:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": list(raw)}
    ours = HotRequest(scope, receive, header_table(scope))
    theirs = Request(dict(scope, headers=list(raw)), receive)
    assert vars(theirs).keys() <= vars(ours).keys()  # (every attribute Starlette's __init__ sets)
    assert ours.receive is receive and ours.method == "POST" and ours.scope is scope
    assert ours.headers.raw == theirs.headers.raw and ours.headers.get("x-dup") == theirs.headers.get("x-dup")
    assert scope["headers"] is ours.headers._list and scope["headers"] == raw  # (Headers' own copy, as Starlette's)
