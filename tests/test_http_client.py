"""The gateway's upstream HTTP/1.1 client (gateway/_http.py) against real loopback servers.

Each server here is a few lines of asyncio that answer exactly the bytes a test needs: TLS
with a throwaway CA (trustme), keep-alive reuse, a pooled connection the server closed,
chunked/content-length/close-delimited bodies, gzip, malformed HTTP, flow control.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trustme

from llmbridge.gateway._http import HIGH_WATER, ConnectError, HTTPClient, ProtocolError, UpstreamHTTPError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


async def serve(handler: Handler, ssl_context: ssl.SSLContext | None = None) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=ssl_context)
    return server, server.sockets[0].getsockname()[1]


async def body_of(response) -> bytes:
    parts = []
    while True:
        await response.inbox.wait()
        parts += response.inbox.take()
        if response.inbox.eof:
            if response.inbox.error:
                raise response.inbox.error
            response.close()
            return b"".join(parts)


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def in_turn(answers: list[bytes | None], delays: list[float] | None = None, connections: list[int] | None = None):
    """A server handler that answers each request of a connection with the next of
    ``answers`` (after the next of ``delays`` seconds, when given); ``None`` never answers
    (the connection stalls 5 s, then closes). Each connection appends to ``connections``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if connections is not None:
            connections.append(1)
        try:
            while answers:
                await read_request(reader)
                if delays:
                    await asyncio.sleep(delays.pop(0))
                answer = answers.pop(0)
                if answer is None:
                    await asyncio.sleep(5)
                    return
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return handler


async def test_keep_alive_reuses_one_connection_and_sends_the_request_as_given():
    connections, heads = [], []

    async def handler(reader, writer):
        connections.append(writer)
        try:
            while True:
                head, body = await read_request(reader)
                heads.append((head, body))
                writer.write(ok(b"pong:" + body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server, port = await serve(handler)
    client = HTTPClient()
    for n in range(3):
        response = await client.request("POST", f"http://127.0.0.1:{port}/v1/x?a=1", {"x-key": "v"}, b"ping%d" % n)
        assert response.status == 200 and response.headers["content-length"] == "10"
        assert await body_of(response) == b"pong:ping%d" % n
    assert len(connections) == 1
    head = heads[0][0].decode()
    assert head.startswith("POST /v1/x?a=1 HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{port}" in head and "x-key: v" in head and "accept-encoding: identity" in head
    await client.aclose()  # the server sees the connection end (IncompleteReadError) and stops
    await asyncio.sleep(0.05)
    server.close()


async def test_a_pooled_connection_the_server_closed_is_retried_once_on_a_fresh_one():
    served = 0

    async def handler(reader, writer):
        nonlocal served
        await read_request(reader)
        served += 1
        writer.write(ok(b"x"))  # keep-alive by default, but the server closes right after
        await writer.drain()
        writer.close()

    server, port = await serve(handler)
    client = HTTPClient()
    assert await body_of(await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")) == b"x"
    await asyncio.sleep(0.05)  # the close reaches the pooled connection (or not: both paths work)
    assert await body_of(await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")) == b"x"
    assert served == 2
    await client.aclose()
    server.close()


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
async def test_body_framings_and_gzip(framing):
    data = b"data: hello\n\n" * 100
    packed = gzip.compress(data)

    async def handler(reader, writer):
        await read_request(reader)
        head = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\n"
        if framing == "chunked":
            writer.write(head + b"transfer-encoding: chunked\r\n\r\n")
            for i in range(0, len(packed), 7):
                piece = packed[i : i + 7]
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            writer.write(b"0\r\n\r\n")
        elif framing == "length":
            writer.write(head + b"content-length: %d\r\n\r\n" % len(packed) + packed)
        else:
            writer.write(head + b"connection: close\r\n\r\n" + packed)
        await writer.drain()
        writer.close()

    server, port = await serve(handler)
    client = HTTPClient()
    assert await body_of(await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"{}")) == data
    await client.aclose()
    server.close()


def tls_contexts(name: str = "127.0.0.1") -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a certificate for ``name`` from a throwaway CA, and a client
    context that trusts that CA (and no other)."""
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(server_ctx)
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    return server_ctx, trusted


async def test_tls_with_a_trusted_ca_and_a_clear_error_without_it():
    server_ctx, trusted = tls_contexts()

    async def handler(reader, writer):
        try:
            await read_request(reader)
            writer.write(ok(b"secure"))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        writer.close()

    server, port = await serve(handler, server_ctx)
    client = HTTPClient(ssl_context=trusted)
    assert await body_of(await client.request("POST", f"https://127.0.0.1:{port}/", {}, b"")) == b"secure"
    await client.aclose()
    stranger = HTTPClient()  # certifi's CAs: the throwaway CA is not among them
    with pytest.raises(ConnectError, match="certificate verify failed"):
        await stranger.request("POST", f"https://127.0.0.1:{port}/", {}, b"")
    await stranger.aclose()
    server.close()


async def test_malformed_http_and_early_close_are_protocol_errors():
    async def garbage(reader, writer):
        await read_request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        writer.close()

    async def cut(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly this")
        await writer.drain()
        writer.close()

    client = HTTPClient()
    server, port = await serve(garbage)
    with pytest.raises(ProtocolError, match="malformed HTTP"):
        await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")
    server.close()
    server, port = await serve(cut)
    response = await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")
    with pytest.raises(ProtocolError, match="before the response was complete"):
        await body_of(response)
    server.close()
    await client.aclose()


async def test_connect_errors_and_bad_urls_and_header_injection():
    client = HTTPClient()
    server, port = await serve(lambda r, w: None)
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectError, match="cannot connect"):
        await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")
    with pytest.raises(UpstreamHTTPError, match="not an http"):
        await client.request("POST", "ftp://example.invalid/", {}, b"")
    with pytest.raises(UpstreamHTTPError, match="line break"):
        await client.request("POST", "http://127.0.0.1:9/", {"x-evil": "a\r\nx-injected: 1"}, b"")
    await client.aclose()


def _socket_buffer_ceiling() -> int:
    """The most the kernel may buffer on one loopback connection: the receive and send buffers'
    autotuning maxima (Linux), else a generous guess."""
    total = 0
    for name in ("tcp_rmem", "tcp_wmem"):
        try:
            total += int(Path(f"/proc/sys/net/ipv4/{name}").read_text().split()[2])
        except (OSError, IndexError, ValueError):
            total += 32 * 1024 * 1024
    return total


async def test_a_slow_consumer_pauses_the_upstream_socket():
    # Flow control: the inbox stops reading the socket past HIGH_WATER bytes waiting, so a slow
    # client cannot make the gateway buffer an upstream's whole answer.  The answer is larger
    # than everything the kernel may buffer between the two ends (autotuned socket buffers
    # reach tens of MB), so the server can finish writing only if the inbox reads it all.
    sent = asyncio.Event()
    chunk = 65536
    total = (16 * HIGH_WATER + _socket_buffer_ceiling()) // chunk * chunk + chunk
    written = 0

    async def handler(reader, writer):
        nonlocal written
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % total)
        try:
            for _ in range(total // chunk):
                writer.write(b"a" * chunk)
                await writer.drain()
                written += chunk
        except ConnectionError:
            pass
        sent.set()
        writer.close()

    server, port = await serve(handler)
    client = HTTPClient()
    response = await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")
    # Nobody takes from the inbox: wait until the server's writing stops moving (the buffers
    # between the two are full), however long that takes on a loaded machine.
    last = -1
    while written != last and not sent.is_set():
        last = written
        await asyncio.sleep(0.2)
    assert response.inbox.size < HIGH_WATER + 2 * chunk + 512 * 1024  # + one read + what was in flight
    assert not sent.is_set()
    got = len(await body_of(response))
    assert got == total
    await client.aclose()
    server.close()


async def test_one_connection_reads_heads_of_every_shape_in_turn_and_times_out_a_missing_head():
    """The head's fields (repeated ones joined, an interim 100 dropped, a gzip body after a
    chunked one) on one kept-alive connection, response after response; a head that never
    comes is a TimeoutError and that connection is not pooled again."""
    answers = [
        b"HTTP/1.1 200 OK\r\nX-Multi: a\r\nx-multi: b\r\nRetry-After: 3\r\ncontent-length: 2\r\n\r\nhi",
        b"HTTP/1.1 100 Continue\r\nx-interim: 1\r\n\r\nHTTP/1.1 429 Slow\r\ntransfer-encoding: chunked\r\n\r\n"
        b"2\r\nno\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n%s"
        % (len(gzip.compress(b"zipped")), gzip.compress(b"zipped")),
        None,  # no answer at all
    ]
    connections: list[int] = []
    server, port = await serve(in_turn(answers, connections=connections))
    client = HTTPClient()
    url = f"http://127.0.0.1:{port}/"
    first = await client.request("POST", url, {}, b"")
    assert first.status == 200 and first.headers["x-multi"] == "a, b" and first.headers["retry-after"] == "3"
    assert await body_of(first) == b"hi"
    second = await client.request("POST", url, {}, b"")
    assert second.status == 429 and "x-interim" not in second.headers
    assert second.headers["transfer-encoding"] == "chunked" and await body_of(second) == b"no"
    third = await client.request("POST", url, {}, b"")
    assert third.status == 200 and await body_of(third) == b"zipped"
    assert len(connections) == 1
    with pytest.raises(TimeoutError):
        await client.request("POST", url, {}, b"", head_timeout=0.2)
    assert not client._idle.get(next(iter(client._idle)), [])  # the timed-out connection was dropped
    await client.aclose()
    server.close()


async def test_the_head_timeout_counts_from_each_request_on_a_kept_alive_connection():
    """The head timer of a kept-alive connection is armed once and moved by each request: a
    later request is not failed by an earlier one's due time, a head that comes late is a
    TimeoutError at its own due time, and a shorter timeout than the armed one still holds."""
    delays = [0.0, 0.25, 0.0, 0.5]  # seconds before each answer
    server, port = await serve(in_turn([ok(b"x")] * len(delays), delays))
    client = HTTPClient()
    url = f"http://127.0.0.1:{port}/"
    loop = asyncio.get_running_loop()
    first = await client.request("POST", url, {}, b"", head_timeout=0.4)  # arms the timer for t0 + 0.4
    assert await body_of(first) == b"x"
    await asyncio.sleep(0.3)
    # Due at t0 + 0.7: the timer armed for t0 + 0.4 wakes mid-wait and must not fail this head.
    second = await client.request("POST", url, {}, b"", head_timeout=0.4)
    assert await body_of(second) == b"x"
    third = await client.request("POST", url, {}, b"", head_timeout=5)  # a later due time than the armed one
    assert await body_of(third) == b"x"
    began = loop.time()
    with pytest.raises(TimeoutError):  # a shorter one than the armed (5 s): its own due time holds
        await client.request("POST", url, {}, b"", head_timeout=0.2)
    assert 0.15 < loop.time() - began < 0.45
    await client.aclose()
    server.close()


async def test_a_compressed_body_is_found_by_its_header_whatever_its_case_and_only_by_it():
    """Content-Encoding in any case inflates the body; a field that only contains the name
    (x-content-encoding) does not; the headers read the same either way."""
    packed = gzip.compress(b"zipped")
    answers = [
        b"HTTP/1.1 200 OK\r\nCONTENT-ENCODING: GZIP\r\ncontent-length: %d\r\n\r\n%s" % (len(packed), packed),
        b"HTTP/1.1 200 OK\r\nX-Content-Encoding: gzip\r\ncontent-length: 5\r\n\r\nplain",
    ]
    server, port = await serve(in_turn(answers))
    client = HTTPClient()
    url = f"http://127.0.0.1:{port}/"
    first = await client.request("POST", url, {}, b"")
    assert await body_of(first) == b"zipped" and first.headers["content-encoding"] == "GZIP"
    second = await client.request("POST", url, {}, b"")
    assert await body_of(second) == b"plain"
    assert second.headers == {"x-content-encoding": "gzip", "content-length": "5"}
    await client.aclose()
    server.close()


# Bytes after a complete response, in its read or a later one before the next request: the
# client never pipelines, so they answer nothing it asked.  They must reach no inbox, and the
# connection must not be reused: a partial head kept by the parser would otherwise become the
# start of the next request's answer (another caller's request, on a shared pool).
STRAYS = {
    "a partial head": b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-stray: 1",
    "a whole answer": ok(b"stray"),
    "a status line's start": b"HTTP/1.",
    "a body's worth of garbage": b"not http at all",
}


@pytest.mark.parametrize("stray", list(STRAYS), ids=list(STRAYS))
@pytest.mark.parametrize("same_read", [True, False], ids=["same read", "later read"])
async def test_bytes_after_a_complete_response_reach_no_one_and_retire_the_connection(stray, same_read):
    connections: list[int] = []
    answered = asyncio.Event()

    async def handler(reader, writer):
        connections.append(1)
        try:
            while True:
                await read_request(reader)
                n = len(connections)
                if same_read:
                    writer.write(ok(b"one-%d" % n) + STRAYS[stray])
                else:
                    writer.write(ok(b"one-%d" % n))
                    await writer.drain()
                    await answered.wait()
                    writer.write(STRAYS[stray])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server, port = await serve(handler)
    client = HTTPClient()
    first = await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")
    parts = []
    while True:
        await first.inbox.wait()
        parts += first.inbox.take()
        if first.inbox.eof:
            break
    answered.set()
    await asyncio.sleep(0.05)  # the strays arrive (a later read: before the response is closed)
    assert first.inbox.error is None and b"".join(parts) == b"one-1"
    assert not first.inbox.items  # nothing after the end reached the finished inbox
    first.close()
    second = await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")
    assert second.status == 200 and "x-stray" not in second.headers
    assert await body_of(second) == b"one-2"  # a fresh connection's own answer
    assert len(connections) == 2
    await client.aclose()
    await asyncio.sleep(0.05)
    server.close()


# -- spare connections: opened ahead of the requests that use them (HTTPClient(spares=N))


def keep_answering(connections: list[asyncio.StreamWriter], hold: asyncio.Event | None = None):
    """A handler that answers every request of its connection with ``ok(b"x")`` (after ``hold``
    is set, when given), appending each connection's writer to ``connections``."""

    async def handler(reader, writer):
        connections.append(writer)
        try:
            while True:
                await read_request(reader)
                if hold is not None:
                    await hold.wait()
                writer.write(ok(b"x"))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    return handler


async def test_a_request_that_takes_the_last_idle_connection_has_a_spare_opened_for_the_next():
    connections: list[asyncio.StreamWriter] = []
    hold = asyncio.Event()
    server, port = await serve(keep_answering(connections, hold))
    url = f"http://127.0.0.1:{port}/"
    client = HTTPClient(spares=1)
    hold.set()
    first = await client.request("POST", url, {}, b"")  # an empty pool: connects, opens no spare
    await body_of(first)
    await asyncio.sleep(0.05)
    assert len(connections) == 1 and not first._connection.reused
    hold.clear()
    second = asyncio.ensure_future(client.request("POST", url, {}, b""))  # takes the last idle one
    assert await _until(lambda: len(connections) == 2)  # the spare, opened in the background
    assert await _until(lambda: len(client._idle[next(iter(client._idle))]) == 1)
    third = asyncio.ensure_future(client.request("POST", url, {}, b""))
    hold.set()
    for response in (await second, await third):
        assert response._connection.reused  # both found their connection open
        assert await body_of(response) == b"x"
    await client.aclose()
    server.close()


async def _until(predicate, timeout: float = 5.0) -> bool:
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


async def test_prepare_opens_the_spares_ahead_with_their_tls_handshake_done():
    server_ctx, trusted = tls_contexts()
    connections: list[asyncio.StreamWriter] = []
    server, port = await serve(keep_answering(connections), server_ctx)
    client = HTTPClient(ssl_context=trusted, spares=2)
    client.prepare(f"https://127.0.0.1:{port}/v1")
    client.prepare(f"https://127.0.0.1:{port}/v1/other")  # the same origin: nothing more to open
    assert await _until(lambda: sum(map(len, client._idle.values())) == 2)
    assert len(connections) == 2 and not client._spare_tasks
    response = await client.request("POST", f"https://127.0.0.1:{port}/v1/chat", {}, b"")
    assert response._connection.reused and await body_of(response) == b"x"
    await client.aclose()
    server.close()


async def test_no_spares_by_default_and_none_for_a_request_that_found_the_pool_empty():
    connections: list[asyncio.StreamWriter] = []
    server, port = await serve(keep_answering(connections))
    for client in (HTTPClient(), HTTPClient(spares=1)):
        connections.clear()
        for _ in range(3):  # one after another: each takes the one the last gave back
            await body_of(await client.request("POST", f"http://127.0.0.1:{port}/", {}, b""))
        await asyncio.sleep(0.05)
        # (spares=1: the second request took the last idle connection, and its spare is the one
        # the third found; the third left the one it took back: one spare, never a stream of them)
        assert len(connections) == (1 if client.spares == 0 else 2)
        client.prepare(f"http://127.0.0.1:{port}/")  # enough idle already: nothing opened
        await asyncio.sleep(0.05)
        assert len(connections) == (1 if client.spares == 0 else 2)
        await client.aclose()
    server.close()


async def test_a_spare_that_cannot_connect_is_logged_quietly_and_not_retried_at_once(caplog):
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()  # a port nobody listens on
    client = HTTPClient(spares=1)
    with caplog.at_level("DEBUG", logger="llmbridge.gateway"):
        client.prepare(f"http://127.0.0.1:{port}/v1")
        assert await _until(lambda: not client._spare_tasks)
        client.prepare(f"http://127.0.0.1:{port}/v1")  # within SPARE_RETRY_AFTER: not tried again
        assert not client._spare_tasks and not client._opening
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
    assert "no spare connection to 127.0.0.1" in caplog.records[0].getMessage()
    assert not caplog.records[0].exc_info
    with pytest.raises(ConnectError):  # the request's own connect fails as it did
        await client.request("POST", f"http://127.0.0.1:{port}/v1", {}, b"")
    await client.aclose()


async def test_closing_the_client_cancels_a_spare_still_opening():
    accepted: list[asyncio.StreamWriter] = []
    done = asyncio.Event()

    async def silent(reader, writer):  # accepts, never answers the TLS handshake
        accepted.append(writer)
        await done.wait()
        writer.close()

    server, port = await serve(silent)
    client = HTTPClient(spares=1)
    client.prepare(f"https://127.0.0.1:{port}/")
    assert await _until(lambda: len(accepted) == 1)
    assert client._spare_tasks
    await client.aclose()
    assert not client._spare_tasks and not client._all and not client._idle
    done.set()
    await asyncio.sleep(0.01)
    server.close()


async def test_a_connection_idle_longer_than_the_expiry_is_closed_not_reused():
    """A NAT or a load balancer may drop an idle connection without a word; one idle past
    ``idle_expiry`` is closed and the request connects afresh (no wait for its head timeout)."""
    connections: list[asyncio.StreamWriter] = []
    server, port = await serve(keep_answering(connections))
    client = HTTPClient()
    client.idle_expiry = 0.2
    url = f"http://127.0.0.1:{port}/"
    first = await client.request("POST", url, {}, b"")
    await body_of(first)
    again = await client.request("POST", url, {}, b"")  # within the expiry: the same connection
    assert again._connection is first._connection and await body_of(again) == b"x"
    await asyncio.sleep(0.3)
    late = await client.request("POST", url, {}, b"")
    assert not late._connection.reused and await body_of(late) == b"x"
    assert len(connections) == 2 and first._connection.closed
    await client.aclose()
    server.close()


async def test_expired_connections_deep_in_the_pool_are_not_reused_and_are_closed_as_others_return():
    """After a burst the pool holds many connections; steady traffic reuses the youngest, and
    the rest go stale below it. They are closed as soon as a connection comes back after their
    expiry, and a later burst never reaches one."""
    connections: list[asyncio.StreamWriter] = []
    hold = asyncio.Event()
    server, port = await serve(keep_answering(connections, hold))
    client = HTTPClient()
    client.idle_expiry = expiry = 0.6
    url = f"http://127.0.0.1:{port}/"
    burst = [asyncio.ensure_future(client.request("POST", url, {}, b"")) for _ in range(4)]
    await asyncio.sleep(0.05)
    hold.set()
    for response in burst:
        await body_of(await response)
    came_back = time.monotonic()
    idle = next(iter(client._idle.values()))
    assert len(idle) == 4 and len(connections) == 4
    stale = idle[:3]
    await asyncio.sleep(expiry / 2)
    await body_of(await client.request("POST", url, {}, b""))  # steady traffic: the youngest only
    youngest_back = time.monotonic()
    assert len(idle) == 4 and not any(c.closed for c in stale)
    # Past the stale ones' expiry, inside the youngest's: it is reused, and as it comes back the
    # three below it are closed.
    await asyncio.sleep(max(0.0, came_back + expiry + 0.1 - time.monotonic()))
    assert time.monotonic() < youngest_back + expiry
    again = await client.request("POST", url, {}, b"")
    assert again._connection.reused
    await body_of(again)
    assert all(c.closed for c in stale) and idle == [again._connection]
    await asyncio.sleep(expiry + 0.1)
    late = [asyncio.ensure_future(client.request("POST", url, {}, b"")) for _ in range(2)]
    for response in late:  # every idle one expired: both connect afresh
        response = await response
        assert not response._connection.reused and await body_of(response) == b"x"
    assert len(connections) == 6
    await client.aclose()
    server.close()


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
async def test_upstream_connections_are_probed_by_tcp_when_quiet(tls):
    """SO_KEEPALIVE with the idle, interval and count of _http: a middlebox keeps the mapping of
    a quiet connection, and a peer that is gone is found in about a minute."""
    import socket

    from llmbridge.gateway import _http

    server_ctx, trusted = tls_contexts() if tls else (None, None)
    connections: list[asyncio.StreamWriter] = []
    server, port = await serve(keep_answering(connections), server_ctx)
    client = HTTPClient(ssl_context=trusted)
    response = await client.request("POST", f"{'https' if tls else 'http'}://127.0.0.1:{port}/", {}, b"")
    sock = response._connection.transport.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == _http.KEEPALIVE_IDLE
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == _http.KEEPALIVE_INTERVAL
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == _http.KEEPALIVE_COUNT
    assert await body_of(response) == b"x"
    await client.aclose()
    server.close()


# -- host names: resolved once for a burst's connects, kept DNS_TTL seconds


def counting_resolver(client: HTTPClient, answer=None) -> list[str]:
    """Count ``client``'s lookups (and answer them with ``answer``, when given)."""
    asked: list[str] = []
    real = client._resolve

    async def resolve(host: str, port: int):
        asked.append(host)
        if answer is None:
            return await real(host, port)
        client._addresses[host] = (asyncio.get_running_loop().time() + client.dns_ttl, answer)
        return answer

    client._resolve = resolve  # type: ignore[method-assign]
    return asked


async def test_a_burst_to_a_host_name_asks_the_resolver_once_and_again_after_the_ttl():
    connections: list[asyncio.StreamWriter] = []
    hold = asyncio.Event()
    server, port = await serve(keep_answering(connections, hold))
    client = HTTPClient()
    client.dns_ttl = 0.3
    asked = counting_resolver(client, [(socket.AF_INET, "127.0.0.1")])
    burst = [asyncio.ensure_future(client.request("POST", f"http://example.test:{port}/", {}, b"")) for _ in range(10)]
    await asyncio.sleep(0.05)
    hold.set()
    for response in burst:
        assert await body_of(await response) == b"x"
    assert asked == ["example.test"] and len(connections) == 10
    await asyncio.sleep(0.4)  # past the TTL: the next new connection asks again
    client.idle_expiry = 0.0  # (so that it needs one)
    assert await body_of(await client.request("POST", f"http://example.test:{port}/", {}, b"")) == b"x"
    assert asked == ["example.test"] * 2
    await client.aclose()
    server.close()


async def test_the_next_address_is_tried_when_one_refuses_and_a_dead_one_is_not_kept():
    connections: list[asyncio.StreamWriter] = []
    server, port = await serve(keep_answering(connections))  # on 127.0.0.1 only
    client = HTTPClient()
    asked = counting_resolver(client, [(socket.AF_INET, "127.0.0.2"), (socket.AF_INET, "127.0.0.1")])
    response = await client.request("POST", f"http://example.test:{port}/", {}, b"")
    assert response._connection.transport.get_extra_info("peername")[0] == "127.0.0.1"
    assert await body_of(response) == b"x"
    await client.aclose()
    client = HTTPClient()
    asked = counting_resolver(client, [(socket.AF_INET, "127.0.0.2")])
    with pytest.raises(ConnectError, match=r"cannot connect to example\.test"):
        await client.request("POST", f"http://example.test:{port}/", {}, b"")
    assert "example.test" not in client._addresses and asked == ["example.test"]  # asked afresh next time
    await client.aclose()
    server.close()


async def test_a_name_that_does_not_resolve_is_a_connect_error_and_an_address_needs_no_lookup():
    client = HTTPClient()
    asked: list[str] = []

    async def unknown(host: str, port: int):  # (the resolver's answer for a name nobody has)
        asked.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    client._resolve = unknown  # type: ignore[method-assign]
    with pytest.raises(ConnectError, match=r"cannot connect to no-such-host\.test:80: .*not known"):
        await client.request("POST", "http://no-such-host.test/", {}, b"")
    assert asked == ["no-such-host.test"] and not client._addresses and not client._resolving
    connections: list[asyncio.StreamWriter] = []
    server, port = await serve(keep_answering(connections))
    assert await body_of(await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")) == b"x"
    assert asked == ["no-such-host.test"]  # (an address is used as it is)
    await client.aclose()
    real = HTTPClient()  # the system's resolver (localhost: /etc/hosts, no network)
    assert await body_of(await real.request("POST", f"http://localhost:{port}/", {}, b"")) == b"x"
    assert "localhost" in real._addresses
    await real.aclose()
    server.close()


async def test_tls_to_a_host_name_is_verified_against_the_name_while_connecting_to_its_address():
    server_ctx, trusted = tls_contexts("api.example.test")
    connections: list[asyncio.StreamWriter] = []
    server, port = await serve(keep_answering(connections), server_ctx)
    client = HTTPClient(ssl_context=trusted)
    counting_resolver(client, [(socket.AF_INET, "127.0.0.1")])
    response = await client.request("POST", f"https://api.example.test:{port}/v1", {}, b"")
    assert await body_of(response) == b"x"
    await client.aclose()
    server.close()
