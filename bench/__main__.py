"""Run the benchmarks: ``python -m bench [NAME ...]`` (default: all). See bench/README.md."""

from __future__ import annotations

import importlib
import os
import sys

BENCHES = {
    "sse": "bench.sse_bench",
    "translate": "bench.translate_bench",
    "gateway": "bench.gateway_bench",
    "local": "bench.local_bench",
    "http": "bench.http_client_bench",
    "profile": "bench.gateway_profile",
    "request": "bench.request_profile",
    "limits": "bench.limits_bench",
    "ui": "bench.ui_bench",
    "teams": "bench.teams_bench",
    "embed": "bench.embed_bench",
    "images": "bench.image_bench",
    "bindings": "bench.bindings_bench",
    "routing": "bench.routing_bench",
    "cache": "bench.cache_bench",
}


def main(argv: list[str]) -> int:
    # The servers the benchmarks start run in temporary directories: a relative PYTHONPATH
    # (PYTHONPATH=src) would silently measure the installed package instead of this tree.
    if path := os.environ.get("PYTHONPATH"):
        os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in path.split(os.pathsep))
    names = argv or list(BENCHES)
    for name in names:
        if name not in BENCHES:
            print(f"unknown benchmark {name!r}; known: {', '.join(BENCHES)}", file=sys.stderr)
            return 2
        try:
            module = importlib.import_module(BENCHES[name])
        except ModuleNotFoundError as exc:
            print(f"== {name}: not available ({exc})\n")
            continue
        print(f"== {name}")
        print(module.run())
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
