"""What the /ui console costs, as ratios against the path without it, measured in one run.

- **traffic**: CPU per streamed answer through the gateway's own exchange (``Gateway.open``
  + ``Exchange.body``, translated to ``anthropic-messages``) with the Traffic ring on (the
  default, 200 entries) against ``ui_traffic = 0``.  The upstream is in-process and yields
  one batch per event, the most batches per answer: the ring's per-batch look is at its
  dearest here.
- **fanout**: the Playground's :class:`Fanout` against the six dialects' encoders run bare
  over the same answer.
- **translator**: ``ui.analyze`` (detect, decode, validate, translate, build the report)
  against the bare decode -> encode of ``llmbridge translate``, over the corpus.
"""

from __future__ import annotations

import asyncio

from llmbridge import dialects, hub
from llmbridge.gateway import config
from llmbridge.gateway._app import Gateway
from llmbridge.gateway._ui import Fanout, analyze

from .common import best_of, corpus_bodies, table

TOKENS = 200
ANSWERS = 20  # answers per timed call


class _Upstream:
    name = "bench"
    timeouts = config.Timeouts()

    async def stream(self, request: hub.Request):
        yield hub.ResponseStart(id="r", model="m")
        yield hub.BlockStart(0, "text")
        for _ in range(TOKENS):
            yield hub.Delta(0, " token")
        yield hub.BlockStop(0)
        yield hub.Usage(10, TOKENS)
        yield hub.Finish("end_turn")
        yield hub.ResponseEnd()


def _gateway(traffic: int) -> Gateway:
    raw = {
        "gateway": {"ui_traffic": traffic},
        "upstreams": {"bench": {"format": "local"}},
        "models": [{"name": "m", "upstream": "bench"}],
    }
    return Gateway(config.parse(raw), {"bench": _Upstream()})


def _answers(gateway: Gateway, loop: asyncio.AbstractEventLoop) -> None:
    codec = dialects.get("anthropic-messages")
    request = hub.Request(model="m", messages=[hub.Message("user", [hub.TextPart("hi")])], stream=True)

    async def many() -> None:
        for _ in range(ANSWERS):
            exchange = await gateway.open(gateway.upstreams["bench"], request, codec, codec.NAME, None, True, False)
            await exchange.prime()
            async for _ in exchange.body():
                pass

    loop.run_until_complete(many())


def _turn() -> list[hub.Event]:
    events: list[hub.Event] = [hub.ResponseStart(id="r", model="m"), hub.BlockStart(0, "text")]
    events += [hub.Delta(0, " token") for _ in range(TOKENS)]
    return [*events, hub.BlockStop(0), hub.Usage(10, TOKENS), hub.Finish("end_turn"), hub.ResponseEnd()]


def run() -> str:
    out = []
    loop = asyncio.new_event_loop()
    try:
        on, off = _gateway(200), _gateway(0)
        t_on = t_off = float("inf")
        for _ in range(4):  # alternate, best of each: the machine's load moves between samples
            t_off = min(t_off, best_of(lambda: _answers(off, loop), repeat=3))
            t_on = min(t_on, best_of(lambda: _answers(on, loop), repeat=3))
    finally:
        loop.close()
    per = ANSWERS
    out.append(
        table(
            ["traffic ring", "CPU µs / answer", "ratio"],
            [["off (ui_traffic = 0)", t_off / per * 1e6, 1.0], ["on (200)", t_on / per * 1e6, t_on / t_off]],
        )
    )

    events = _turn()
    request = hub.Request(model="m", stream=True)

    def six() -> None:
        fanout = Fanout(request)
        for e in events:
            fanout.feed(e)

    def bare() -> None:
        encoders = [dialects.stream_encoder(dialects.get(n), request) for n in dialects.NAMES]
        for e in events:
            for encoder in encoders:
                encoder.encode(e)

    t_six, t_bare = best_of(six), best_of(bare)
    out.append(
        table(
            ["encoding one answer in six dialects", "CPU µs", "ratio"],
            [
                ["the six encoders alone", t_bare * 1e6, 1.0],
                ["Fanout (+ text for the page, kept bytes)", t_six * 1e6, t_six / t_bare],
            ],
        )
    )

    bodies = [b for name, b in corpus_bodies("anthropic-messages")]

    def cli() -> None:
        src, dst = dialects.get("anthropic-messages"), dialects.get("openai-chat")
        for body in bodies:
            decoder, encoder = src.StreamDecoder(), dst.StreamEncoder()
            b"".join(encoder.encode(e) for e in decoder.feed(body) + decoder.close())

    def report() -> None:
        for body in bodies:
            analyze(body, None, "openai-chat").to_dict()

    t_cli, t_report = best_of(cli, repeat=3), best_of(report, repeat=3)
    size = sum(len(b) for b in bodies)
    out.append(
        table(
            ["anthropic-messages corpus -> openai-chat", "MB / CPU s", "ratio (time)"],
            [
                ["llmbridge translate (decode, encode)", size / t_cli / 1e6, 1.0],
                ["console analyze (+ detect, validate, report)", size / t_report / 1e6, t_report / t_cli],
            ],
        )
    )
    return "\n\n".join(out)
