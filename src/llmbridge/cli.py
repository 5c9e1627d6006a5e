"""The ``llmbridge`` command: translate, validate, serve, replay, usage, deployments, dialects.

Exit codes: 0 success; 1 ``validate`` found violations; 2 the input is malformed or
truncated (``translate``), or bad usage; 3 a dialect or subsystem is not available.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from typing import BinaryIO

from . import __version__, dialects, hub
from .dialects import rules
from .dialects.base import DialectModule

__all__ = [
    "CHUNK",
    "CLIError",
    "build_parser",
    "cmd_deployments",
    "cmd_dialects",
    "cmd_replay",
    "cmd_serve",
    "cmd_translate",
    "cmd_validate",
    "main",
]

CHUNK = 64 * 1024
EXIT_OK, EXIT_VIOLATIONS, EXIT_MALFORMED, EXIT_UNAVAILABLE = 0, 1, 2, 3


class CLIError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _dialect(name: str, *needs: str) -> DialectModule:
    """Dialect ``name``'s module, which must have the attributes ``needs`` (modules land one by one)."""
    if name == "llm-stream-binary":  # LLM-Stream's binary binding (docs/llm-stream-bindings.md §2)
        from .bindings import BinaryDialect

        return BinaryDialect  # type: ignore[return-value]
    try:
        module = dialects.get(name)
    except KeyError as exc:
        raise CLIError(str(exc.args[0]), EXIT_MALFORMED) from None
    except ImportError as exc:
        raise CLIError(f"dialect {name!r} is not available in this build ({exc})", EXIT_UNAVAILABLE) from None
    missing = [n for n in needs if not hasattr(module, n)]
    if missing:
        raise CLIError(f"dialect {name!r} is not available yet (no {', '.join(missing)})", EXIT_UNAVAILABLE)
    return module


def _open_input(path: str) -> BinaryIO:
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as exc:
        raise CLIError(f"cannot read {path}: {exc.strerror}", EXIT_MALFORMED) from None


def _chunks(stream: BinaryIO) -> Iterator[bytes]:
    """What is available, as it arrives: a pipe's bytes are not held back until CHUNK fills."""
    read = getattr(stream, "read1", stream.read)
    while chunk := read(CHUNK):
        yield chunk


# --------------------------------------------------------------------------- commands


def cmd_dialects(args: argparse.Namespace) -> int:
    for name in dialects.NAMES + dialects.MORE_NAMES:
        try:
            module = dialects.get(name)
            note = "" if hasattr(module, "StreamDecoder") and hasattr(module, "StreamEncoder") else "  (partial)"
        except ImportError:
            note = "  (not available)"
        print(f"{name}{note}")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    decoder = _dialect(args.format, "StreamDecoder").StreamDecoder()
    events: list[hub.Event] = []
    source = _open_input(args.file)
    try:
        for chunk in _chunks(source):
            events += decoder.feed(chunk)
        events += decoder.close()
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    of_hub = hub.validate(events)
    problems = [str(v) for v in decoder.violations]
    problems += [f"{v} (hub)" for v in of_hub]
    for line in problems:
        print(line)
    if problems:  # then what each broken rule means, once per rule (dialects/rules.py)
        print("\nrules:")
        for rule in dict.fromkeys(v.rule for v in decoder.violations + of_hub):
            print(f"  {rule}: {rules.meaning(rule) or '(no description)'}")
    return EXIT_VIOLATIONS if problems else EXIT_OK


def cmd_translate(args: argparse.Namespace) -> int:
    decoder = _dialect(args.source, "StreamDecoder").StreamDecoder()
    encoder = _dialect(args.target, "StreamEncoder").StreamEncoder()
    out = sys.stdout.buffer
    source = _open_input(args.file)
    try:
        for chunk in _chunks(source):
            data = b"".join([encoder.encode(e) for e in decoder.feed(chunk)])
            if data:
                out.write(data)
                out.flush()
        out.write(b"".join([encoder.encode(e) for e in decoder.close()]))
        out.flush()
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    if decoder.violations:
        first = decoder.violations[0]
        more = len(decoder.violations) - 1
        extra = f" (and {more} more; run `llmbridge validate --format {args.source}`)" if more else ""
        raise CLIError(f"malformed {args.source} input: {first}{extra}", EXIT_MALFORMED)
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from . import gateway
    except ImportError as exc:
        message = f"the gateway needs its extra: pip install 'llmbridge[gateway]' ({exc})"
        raise CLIError(message, EXIT_UNAVAILABLE) from None
    if args.workers < 1:
        raise CLIError("--workers must be at least 1", EXIT_MALFORMED)
    if args.http2 or args.certfile:
        from .gateway import _http2 as http2

        http2.serve(args.config, args.host, args.port, certfile=args.certfile, keyfile=args.keyfile)
        return EXIT_OK
    gateway.serve(args.config, args.host, args.port, args.workers)
    return EXIT_OK


def cmd_replay(args: argparse.Namespace) -> int:
    try:
        from . import replay
    except ImportError as exc:
        raise CLIError(f"replay is not available in this build ({exc})", EXIT_UNAVAILABLE) from None
    if args.format is not None:
        _dialect(args.format)
    replay.serve(args.directory, args.host, args.port, args.seed, args.format, args.delay_ms)
    return EXIT_OK


DEPLOYMENT_COLUMNS = (
    "model_name", "deployment", "state", "in_flight", "latency_ewma_ms", "failures", "requests", "errors",
    "cooling_for_s", "retry_after_s",
)  # fmt: skip


def cmd_deployments(args: argparse.Namespace) -> int:
    """``GET /admin/deployments`` of a running gateway, as a table (or its JSON)."""
    import json
    import urllib.error
    import urllib.request

    url = args.url.rstrip("/") + "/admin/deployments"
    key = args.key or os.environ.get("LLMBRIDGE_ADMIN_KEY")
    request = urllib.request.Request(url, headers={"authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=args.timeout) as response:
            rows = json.loads(response.read())["data"]
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except Exception:
            message = exc.reason
        raise CLIError(f"{url}: HTTP {exc.code}: {message}", EXIT_UNAVAILABLE) from None
    except (OSError, ValueError, KeyError) as exc:
        raise CLIError(f"cannot read {url} ({type(exc).__name__}: {exc})", EXIT_UNAVAILABLE) from None
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    table = [list(DEPLOYMENT_COLUMNS)] + [
        ["-" if r.get(c) is None else str(r.get(c)) for c in DEPLOYMENT_COLUMNS] for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(DEPLOYMENT_COLUMNS))]
    for row in table:
        print("  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    return EXIT_OK


def cmd_usage(args: argparse.Namespace) -> int:
    from .gateway._teams import keys, report

    url = args.database_url
    if url is None:
        from .gateway import config

        try:
            url = (config.load(args.config) if args.config else config.default_config()).gateway.teams.database_url
        except config.ConfigError as exc:
            raise CLIError(str(exc), EXIT_MALFORMED) from None
    try:
        rows = report.run(url, args.by, args.since)
    except (ValueError, keys.KeyInputError) as exc:
        raise CLIError(str(exc), EXIT_MALFORMED) from None
    except Exception as exc:  # the database cannot be opened or read: one line, no traceback
        raise CLIError(f"cannot read the ledger ({type(exc).__name__}: {exc})", EXIT_UNAVAILABLE) from None
    report.render(rows, args.by, sys.stdout, args.json)
    return EXIT_OK


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    names = ", ".join(dialects.NAMES + dialects.MORE_NAMES)
    parser = argparse.ArgumentParser(prog="llmbridge", description="LLM streaming wire formats, bridged.")
    parser.add_argument("--version", action="version", version=f"llmbridge {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "translate",
        help="translate a streamed response body between dialects",
        description=f"Decode FILE as --from and write it encoded as --to. Dialects: {names}.",
    )
    p.add_argument("--from", dest="source", required=True, metavar="DIALECT")
    p.add_argument("--to", dest="target", required=True, metavar="DIALECT")
    p.add_argument("file", nargs="?", default="-", metavar="FILE", help="input body; - or nothing for stdin")
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser(
        "validate",
        help="check a streamed response body against its dialect's grammar",
        description=f"Exit 0 when FILE conforms to --format, else list the violations. Dialects: {names}.",
    )
    p.add_argument("--format", required=True, metavar="DIALECT")
    p.add_argument("file", nargs="?", default="-", metavar="FILE", help="input body; - or nothing for stdin")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("serve", help="run the gateway")
    p.add_argument("--config", default=None, metavar="FILE", help="TOML config; none serves the embedded model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--workers", type=int, default=1, help="processes serving the port (each loads the local model if used)"
    )
    p.add_argument("--http2", action="store_true", help="serve HTTP/2 (h2c, or h2 over TLS) besides HTTP/1.1")
    p.add_argument("--certfile", default=None, help="TLS certificate (PEM); with --keyfile serves https")
    p.add_argument("--keyfile", default=None, help="TLS private key (PEM)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("replay", help="serve recorded streams (a directory of bodies) as a fake upstream")
    p.add_argument("directory", metavar="DIR")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--seed", type=int, default=0, help="seed of the random chunk boundaries")
    p.add_argument("--format", default=None, metavar="DIALECT")
    p.add_argument("--delay-ms", type=float, default=0.0, help="pause before each chunk (pacing)")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("usage", help="the team gateway's usage report (tokens and cost) from its ledger")
    p.add_argument("--config", default=None, metavar="FILE", help="the gateway's TOML (for database_url)")
    p.add_argument("--database-url", default=None, metavar="URL", help="sqlite:///FILE or postgresql://...")
    p.add_argument("--by", choices=("key", "model", "day"), default="key")
    p.add_argument("--since", default=None, help="RFC 3339 time, a date, or a span back like 24h or 7d")
    p.add_argument("--json", action="store_true", help="JSON rows, as GET /admin/usage serves them")
    p.set_defaults(func=cmd_usage)

    p = sub.add_parser(
        "deployments",
        help="a running gateway's deployments: state, requests in flight, latency (GET /admin/deployments)",
    )
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the gateway's base URL")
    p.add_argument("--key", default=None, help="the master key (or a gateway key); default $LLMBRIDGE_ADMIN_KEY")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds")
    p.add_argument("--json", action="store_true", help="the JSON rows, as the endpoint serves them")
    p.set_defaults(func=cmd_deployments)

    from .conformance._cli import add_parser as add_conformance

    add_conformance(sub)

    p = sub.add_parser("dialects", help="list the dialect names")
    p.set_defaults(func=cmd_dialects)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CLIError as exc:
        print(f"llmbridge {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:
        # The reader went away (`| head`): not an error of ours; silence the flush at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug in a codec: one line, not a traceback, unless asked
        if os.environ.get("LLMBRIDGE_DEBUG"):
            raise
        print(
            f"llmbridge {args.command}: internal error: {type(exc).__name__}: {exc} "
            f"(set LLMBRIDGE_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_MALFORMED


if __name__ == "__main__":
    sys.exit(main())
