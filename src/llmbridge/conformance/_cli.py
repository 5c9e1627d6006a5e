"""``llmbridge conformance URL``: the suite as a command (exit 1 on any MUST failure)."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_parser", "command"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "conformance",
        help="check a server against LLM-Stream 1.0 and its bindings",
        description="Black-box checks of URL/v1/stream (SSE, binary and WebSocket bindings). "
        "Exit status 1 when a MUST check fails, 0 otherwise.",
    )
    p.add_argument("url", metavar="URL", help="the server root, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", default="local", help="the model to ask for (default: local)")
    p.add_argument("--tool-model", default=None, metavar="M", help="model for the tool-call check (default: --model)")
    p.add_argument(
        "--cancel-model", default=None, metavar="M", help="model for the cancellation checks (default: --model)"
    )
    p.add_argument("--api-key", default=None, metavar="K", help="sent as Authorization: Bearer K")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--junit", default=None, metavar="FILE", help="also write JUnit XML to FILE")
    p.add_argument("--http2", action="store_true", help="HTTP/2: h2c with prior knowledge on http://, ALPN on https://")
    p.add_argument("--insecure", action="store_true", help="do not verify TLS certificates")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from . import run, to_json, to_junit, to_text

    report = run(
        args.url,
        args.model,
        api_key=args.api_key,
        tool_model=args.tool_model,
        cancel_model=args.cancel_model,
        timeout=args.timeout,
        http2=args.http2,
        verify=not args.insecure,
    )
    print(to_json(report) if args.json else to_text(report))
    if args.junit:
        with open(args.junit, "wb") as f:
            f.write(to_junit(report))
    sys.stdout.flush()
    return 0 if report.ok else 1
