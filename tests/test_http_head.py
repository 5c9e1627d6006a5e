"""The upstream client's response heads (gateway/_http.py), held to what they were before
issue 23 made them cheap.

The connection's parser no longer calls Python once per header field: it keeps the head's
bytes and :attr:`Response.headers` parses them when asked.  Every test here compares with
:class:`Reference`, an httptools parser with an ``on_header`` callback, which is what the
connection did before: the same status, the same headers (names lower-cased, repeated ones
joined with ", "), the same body, and the same refusals, whatever the head's shape and however
its bytes are cut into reads.  The connection is driven directly (a fake transport), so every
byte boundary can be tried.

What llhttp (httptools 0.9) accepts, and so what these tests pin: CR and LF before a status
line are skipped; values lose their leading blanks, not their trailing ones; a line must end in
CRLF (a bare LF is refused, in the status line, a field or the blank line) and an obs-fold
continuation line is refused; a 1xx head has no body, whatever its fields say.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib

import httptools
import pytest

from llmbridge.gateway import _http
from llmbridge.gateway._http import HTTPClient, ProtocolError

VENDOR_HEAD = (  # an OpenAI streaming answer's head, 24 fields (values made up)
    b"HTTP/1.1 200 OK\r\n"
    b"Date: Thu, 03 Dec 2026 16:00:00 GMT\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\naccess-control-expose-headers: X-Request-ID\r\n"
    b"openai-organization: user-abc123\r\nopenai-processing-ms: 182\r\nopenai-project: proj_abc123\r\n"
    b"openai-version: 2020-10-01\r\nx-envoy-upstream-service-time: 187\r\nx-ratelimit-limit-requests: 10000\r\n"
    b"x-ratelimit-limit-tokens: 30000000\r\nx-ratelimit-remaining-requests: 9999\r\n"
    b"x-ratelimit-remaining-tokens: 29999990\r\nx-ratelimit-reset-requests: 6ms\r\nx-ratelimit-reset-tokens: 0s\r\n"
    b"x-request-id: req_0123456789abcdef\r\nstrict-transport-security: max-age=31536000; includeSubDomains\r\n"
    b"cf-cache-status: DYNAMIC\r\nset-cookie: __cf_bm=abc; path=/; HttpOnly; Secure\r\n"
    b"x-content-type-options: nosniff\r\nServer: cloudflare\r\nCF-RAY: 8f0a1b2c3d4e5f60-FRA\r\n"
    b'alt-svc: h3=":443"; ma=86400\r\n\r\n'
)
SSE = b"data: {}\n\n"
HEADLIKE = b"\r\n\r\nHTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n\r\n"  # a body that looks like a head


def chunked(body: bytes, trailer: bytes = b"") -> bytes:
    return (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n" + trailer + b"\r\n"


# (name, the response's bytes, its body).  Framing: chunked, content-length, or the
# connection's end (the test closes it after the last read).
CASES = [
    ("vendor head, chunked", VENDOR_HEAD + chunked(SSE), SSE),
    (
        "repeated names in any case",
        b"HTTP/1.1 200 OK\r\nX-Multi: a\r\nx-multi: b\r\nX-MULTI: c\r\nSet-Cookie: s=1\r\nset-cookie: t=2\r\n"
        b"content-length: 2\r\n\r\nhi",
        b"hi",
    ),
    (
        "blanks around values, empty values, colons and tabs inside",
        b"HTTP/1.1 200 OK\r\nA:   spaced  \r\nB:\ttabbed\t\r\nC:\r\nD: \r\nE:x:y: z\r\nF: a\tb\r\n"
        b"Content-Length:  2  \r\n\r\nhi",
        b"hi",
    ),
    ("latin-1 bytes in a value", b"HTTP/1.1 200 OK\r\nX-Name: caf\xe9\r\ncontent-length: 1\r\n\r\nx", b"x"),
    (
        "a 100 Continue (with a field) first",
        b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\nHTTP/1.1 429 Slow\r\nRetry-After: 3\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + chunked(b"no"),
        b"no",
    ),
    (
        "two interim heads, one claiming a body, CR and LF around them",
        b"\r\n\nHTTP/1.1 100 Continue\r\ncontent-length: 3\r\n\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n\n"
        b"HTTP/1.1 200 OK\r\nLink: </b>\r\ncontent-length: 2\r\n\r\nok",
        b"ok",
    ),
    ("CR and LF before the status line", b"\r\n\r\n\r\r\nHTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nx", b"x"),
    ("no reason phrase, no fields", b"HTTP/1.1 204\r\n\r\n", b""),
    ("HTTP/1.0, close-delimited", b"HTTP/1.0 200 OK\r\nX-A: 1\r\n\r\nuntil the end", b"until the end"),
    ("close-delimited", b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + SSE * 3, SSE * 3),
    (
        "a body holding blank lines and head-like bytes",
        b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(HEADLIKE), HEADLIKE),
        HEADLIKE,
    ),
    (
        "trailers (not read)",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(b"body", b"X-Trailer: 1\r\n"),
        b"body",
    ),
]

# Heads llhttp refuses; each must still be a ProtocolError, however it is cut.
REFUSED = [
    ("LF-only line ends", b"HTTP/1.1 200 OK\nA: 1\ncontent-length: 0\n\n"),
    ("an LF-only field line", b"HTTP/1.1 200 OK\r\nA: 1\ncontent-length: 0\r\n\r\n"),
    ("an LF-only blank line", b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\n"),
    ("obs-fold (space)", b"HTTP/1.1 200 OK\r\nA: 1\r\n 2\r\ncontent-length: 0\r\n\r\n"),
    ("obs-fold (tab)", b"HTTP/1.1 200 OK\r\nA: 1\r\n\t2\r\ncontent-length: 0\r\n\r\n"),
    ("a bare CR in a value", b"HTTP/1.1 200 OK\r\nA: 1\r2\r\ncontent-length: 0\r\n\r\n"),
    ("a NUL in a value", b"HTTP/1.1 200 OK\r\nA: 1\x002\r\ncontent-length: 0\r\n\r\n"),
    ("a space before the colon", b"HTTP/1.1 200 OK\r\nA : 1\r\ncontent-length: 0\r\n\r\n"),
    ("no colon", b"HTTP/1.1 200 OK\r\nA 1\r\ncontent-length: 0\r\n\r\n"),
    ("an empty name", b"HTTP/1.1 200 OK\r\n: 1\r\ncontent-length: 0\r\n\r\n"),
    ("a non-token name", b"HTTP/1.1 200 OK\r\nA\xc3\xa9: 1\r\ncontent-length: 0\r\n\r\n"),
    ("whitespace before the first field", b"HTTP/1.1 200 OK\r\n A: 1\r\ncontent-length: 0\r\n\r\n"),
    ("content-length twice", b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\ncontent-length: 0\r\n\r\n"),
    ("content-length and chunked", b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\ntransfer-encoding: chunked\r\n\r\n"),
    ("not HTTP", b"NOT HTTP AT ALL\r\n\r\n"),
    ("junk before the status line", b" HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
]


class Reference:
    """The head as the connection read it before issue 23: httptools calls ``on_header`` per
    field; an interim head's fields are dropped; repeated names are joined with ", "."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.fields: list[tuple[bytes, bytes]] = []
        self.status = 0
        self.headers: dict[str, str] | None = None
        self.body: list[bytes] = []

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.headers is None:  # (not a trailer)
            self.fields.append((name, value))

    def on_headers_complete(self) -> None:
        fields, self.fields = self.fields, []
        if 100 <= self.parser.get_status_code() < 200:
            return
        self.status = self.parser.get_status_code()
        self.headers = {}
        for name, value in fields:
            key, text = name.lower().decode("latin-1"), value.decode("latin-1")
            self.headers[key] = self.headers[key] + ", " + text if key in self.headers else text

    def on_body(self, body: bytes) -> None:
        self.body.append(body)


def reference(data: bytes) -> Reference:
    ref = Reference()
    ref.parser.feed_data(data)
    return ref


class Transport:
    def __init__(self) -> None:
        self.aborted = False

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return self.aborted

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def abort(self) -> None:
        self.aborted = True


def connection(client: HTTPClient | None = None) -> _http._Connection:
    conn = _http._Connection(client or HTTPClient(), _http._Origin("http", "upstream", 80))
    conn.connection_made(Transport())
    return conn


def feed(conn: _http._Connection, reads: list[bytes], close: bool = True) -> tuple[_http.Response, bytes]:
    """Send a request on ``conn`` and answer it with ``reads``; the response and its body so
    far (the connection is closed after the last read unless the response completed or
    ``close`` is false).  A failure is raised."""
    response = conn.send(b"POST / HTTP/1.1\r\n\r\n")
    for data in reads:
        conn.data_received(data)
        if response.inbox.eof:
            break
    if close and not response.inbox.eof:
        conn.connection_lost(None)
    body = b"".join(response.inbox.take())
    if response.inbox.error is not None:
        raise response.inbox.error
    return response, body


def splits(data: bytes):
    """``data`` whole, cut in two at every byte boundary, and a byte per read."""
    yield [data]
    for i in range(1, len(data)):
        yield [data[:i], data[i:]]
    yield [data[i : i + 1] for i in range(len(data))]


@pytest.mark.parametrize(("name", "data", "body"), CASES, ids=[c[0] for c in CASES])
async def test_a_head_reads_as_it_did_however_it_is_cut(name, data, body):
    ref = reference(data)
    assert ref.headers is not None and b"".join(ref.body) == body
    for reads in splits(data):
        conn = connection()
        response, got = feed(conn, reads)
        assert (response.status, response.headers, got) == (ref.status, ref.headers, body), reads
        assert response.complete and not conn._reads and conn._interim == 0


async def test_a_vendor_head_is_kept_alone_and_parsed_only_when_asked():
    """The vendor head's 24 fields, as they are named and joined; the response keeps the head
    alone, not the read it came in (the body's first bytes)."""
    conn = connection()
    response, body = feed(conn, [VENDOR_HEAD + chunked(SSE)[:-5] * 2], close=False)
    assert body == SSE * 2 and not response.complete
    assert response._head == VENDOR_HEAD and response._headers is None  # not parsed until asked
    assert len(response.headers) == 24 and response.headers["cf-ray"] == "8f0a1b2c3d4e5f60-FRA"
    assert response.headers["transfer-encoding"] == "chunked" and response.headers["server"] == "cloudflare"


@pytest.mark.parametrize(("name", "data"), REFUSED, ids=[c[0] for c in REFUSED])
async def test_a_head_llhttp_refuses_is_still_a_protocol_error(name, data):
    with pytest.raises(httptools.HttpParserError):
        reference(data)
    for reads in splits(data):
        conn = connection()
        with pytest.raises(ProtocolError, match="malformed HTTP"):
            feed(conn, reads)
        assert conn.transport.aborted


@pytest.mark.parametrize("encoding", ["gzip", "GZIP", "x-gzip", "deflate", "Deflate  "])
@pytest.mark.parametrize("name", ["content-encoding", "Content-Encoding", "CONTENT-encoding"])
@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
async def test_a_compressed_body_is_inflated_whatever_the_case_and_framing(encoding, name, framing):
    data = SSE * 50
    packed = zlib.compress(data) if encoding.strip().lower() == "deflate" else gzip.compress(data)
    head = b"HTTP/1.1 200 OK\r\nx-before: 1\r\n%s: %s\r\n" % (name.encode(), encoding.encode())
    if framing == "chunked":
        answer = (
            head
            + b"transfer-encoding: chunked\r\n\r\n"
            + b"".join(chunked(packed[i : i + 50])[:-5] for i in range(0, len(packed), 50))
            + b"0\r\n\r\n"
        )
    elif framing == "length":
        answer = head + b"content-length: %d\r\n\r\n" % len(packed) + packed
    else:
        answer = head + b"connection: close\r\n\r\n" + packed
    for cut in (len(head) - 7, len(head) + 10, len(answer) // 2):
        response, body = feed(connection(), [answer[:cut], answer[cut:]])
        assert body == data and response.headers["content-encoding"] == encoding


async def test_a_name_that_only_holds_content_encoding_does_not_inflate():
    answer = (
        b"HTTP/1.1 200 OK\r\nX-Content-Encoding: gzip\r\nx-why: content-encoding: gzip\r\ncontent-length: 5\r\n\r\n"
    )
    answer += b"plain"
    response, body = feed(connection(), [answer])
    assert body == b"plain" and response.headers == reference(answer).headers


async def test_a_kept_alive_connection_reads_each_head_afresh():
    """Response after response on one connection, their heads cut differently: no response's
    fields (or bytes) show in the next one's, and the connection keeps nothing between them."""
    client = HTTPClient()
    conn = connection(client)
    answers = [data for _, data, _ in CASES if b"connection: close" not in data and b"HTTP/1.0" not in data]
    for n, answer in enumerate(answers * 2):
        cut = (n * 37) % len(answer)
        reads = [answer[:cut], answer[cut:]] if cut else [answer]
        response, _ = feed(conn, reads, close=False)
        assert response.complete and response.headers == reference(answer).headers, n
        assert not conn._reads and conn._interim == 0 and not conn._in_head
        response.close()
        assert client._checkout(conn.origin) is conn  # pooled again: the next request takes it


async def test_bytes_after_a_complete_response_keep_its_connection_out_of_the_pool():
    client = HTTPClient()
    conn = connection(client)
    response, body = feed(
        conn, [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\nX-Stray: 1\r\n\r\n"]
    )
    assert body == b"hi" and response.status == 200 and response.headers == {"content-length": "2"}
    response.close()
    assert conn.transport.aborted and client._checkout(conn.origin) is None


async def test_an_interim_head_in_a_read_of_its_own_does_not_end_the_response():
    conn = connection()
    response = conn.send(b"POST / HTTP/1.1\r\n\r\n")
    conn.data_received(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert not response.head.done() and not response.inbox.eof and not response.complete
    conn.data_received(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert response.head.done() and response.status == 200 and not response.inbox.eof
    conn.data_received(b"hi")
    assert response.inbox.take() == [b"hi"] and response.inbox.eof and response.complete


async def test_a_head_over_64_kib_fails_and_what_is_kept_for_a_head_stays_bounded():
    fields = b"".join(b"x-field-%05d: %s\r\n" % (i, b"v" * 40) for i in range(3000))  # ~170 KiB
    big = b"HTTP/1.1 200 OK\r\n" + fields + b"content-length: 0\r\n\r\n"
    for size in (1024, 65536, len(big)):  # many reads, reads of the limit, one read
        conn = connection()
        response = conn.send(b"POST / HTTP/1.1\r\n\r\n")
        kept = 0
        for i in range(0, len(big), size):
            conn.data_received(big[i : i + size])
            kept = max(kept, sum(map(len, conn._reads)))
            if response.inbox.eof:
                break
        assert isinstance(response.inbox.error, ProtocolError) and "over 64 KiB" in str(response.inbox.error)
        assert kept <= _http._MAX_HEAD + size and conn.transport.aborted
        with pytest.raises(ProtocolError, match="over 64 KiB"):
            response.head.result()
    # Just under the limit, with interim heads: read in full.
    head = b"HTTP/1.1 200 OK\r\n" + fields[: 57 * 1100] + b"content-length: 0\r\n\r\n"  # 1,100 fields
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" * 8 + head
    assert 60 * 1024 < len(answer) <= _http._MAX_HEAD
    response, _ = feed(connection(), [answer[i : i + 1000] for i in range(0, len(answer), 1000)])
    assert response.headers == reference(answer).headers and len(response.headers) > 1000


async def test_framing_at_the_connection_s_end():
    """A body framed by the connection's end is complete when it closes; one framed by length
    or chunks (whatever the case of ``chunked``) is cut short, a ProtocolError."""
    response, body = feed(connection(), [b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"])
    assert body == b"all of it" and response.complete
    for head in (
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 100\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: Chunked\r\n\r\n",
    ):
        with pytest.raises(ProtocolError, match="before the response was complete"):
            feed(connection(), [head + b"a\r\n0123"])
    # A head that never completed (timed out here) is not a close-delimited body's.
    conn = connection()
    response = conn.send(b"POST / HTTP/1.1\r\n\r\n")
    conn.expect_head(0.001)
    conn.data_received(b"HTTP/1.1 200 OK\r\nConnection: close\r\n")
    await asyncio.sleep(0.01)
    assert isinstance(response.head.exception(), TimeoutError)
    conn.connection_lost(None)
    assert not response.complete and isinstance(response.inbox.error, ProtocolError)


async def test_the_headers_of_an_error_are_read_after_its_connection_moved_on():
    """An error's headers are read after its body, when the connection may already serve the
    next response: the response's head is its own."""
    client = HTTPClient()
    conn = connection(client)
    first, _ = feed(conn, [b"HTTP/1.1 429 Slow\r\nRetry-After: 7\r\ncontent-length: 0\r\n\r\n"], close=False)
    first.close()
    second, _ = feed(conn, [b"HTTP/1.1 200 OK\r\nRetry-After: 1\r\ncontent-length: 0\r\n\r\n"], close=False)
    assert first.headers == {"retry-after": "7", "content-length": "0"}
    assert second.headers["retry-after"] == "1"


def test_the_raw_head_search_is_what_llhttp_parsed():
    """_head_span finds the final head llhttp read: after CR/LF and interim heads."""
    data = b"\r\n" + b"HTTP/1.1 100 Continue\r\n\r\n\n" + b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\nbody\r\n\r\n"
    start, end = _http._head_span(data, 1)
    assert data[start:end] == b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n"
    assert _http._head_span(b"HTTP/1.1 200 OK\r\n\r\n", 0) == (0, 19)
    with pytest.raises(ProtocolError):
        _http._head_span(b"HTTP/1.1 200 OK\n\n", 0)


async def test_a_loopback_upstream_with_a_vendor_head_split_across_writes():
    """The same over a real socket: the head in three writes, then the body."""

    async def handler(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        for part in (VENDOR_HEAD[:100], VENDOR_HEAD[100:-3], VENDOR_HEAD[-3:] + chunked(SSE)):
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.close()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = HTTPClient()
    response = await client.request("POST", f"http://127.0.0.1:{port}/", {}, b"")
    assert response.headers == reference(VENDOR_HEAD).headers
    assert await response.read(1 << 20) == SSE
    await client.aclose()
    server.close()


async def test_a_response_knows_whether_any_of_it_came():
    """got_bytes (a request answered by no byte is sent again on a fresh connection): false
    until a byte comes, true once one did, whatever then failed the head."""
    for reads in (
        [],
        [b"H"],
        [b"HTTP/1.1 200 OK\r\nA"],
        [b"NOT HTTP\r\n\r\n"],
        [b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 12000],
    ):
        conn = connection()
        response = conn.send(b"POST / HTTP/1.1\r\n\r\n")
        for data in reads:
            conn.data_received(data)
        conn.connection_lost(None)
        assert isinstance(response.head.exception(), ProtocolError)
        assert response.got_bytes == bool(reads), reads
    response, _ = feed(connection(), [b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"])
    assert response.got_bytes
