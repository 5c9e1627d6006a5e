"""A small mutation runner: ``python -m tests.mutate`` (``make mutate``), docs/testing.md.

It changes one thing at a time in the code under test and runs the tests that should notice;
a mutant the tests pass with has *survived*: a gap in the tests.  Two kinds of mutants:

- **map entries** (the finish-reason and usage maps): each entry's value swapped for the
  next different value of the same map (``STOP_TO_HUB['max_tokens']: 'max_tokens' ->
  'end_turn'``), and each entry removed; sets lose one member at a time;
- **code** (``sse.py``, ``hub.py``, the dialects' finish and usage functions): one AST
  node at a time: a comparison flipped (``==``/``!=``, ``<``/``<=``, ``in``/``not in``,
  ``is``/``is not``), ``and``/``or`` swapped, a ``not`` dropped, ``+``/``-`` swapped,
  an integer plus one, ``True``/``False`` swapped, a string or bytes constant changed.

Why not mutmut: mutmut 3 copies the project into ``mutants/`` and runs the suite there
through trampolines; with our 2 shared cores, the official SDKs' import time (~4 s per
pytest start) and a 100 s translation matrix, a run over these files did not finish in an
hour (docs/testing.md has the A/B).  This runner imports everything once, then forks one
child per mutant: the child mutates the live objects in place (a map's own dict, so every
``from ... import MAP`` sees it; a function's ``__code__``, recompiled from the mutated AST
with the original line numbers) and runs only the tests of that target with ``-x``.

Usage::

    python -m tests.mutate                     # every target
    python -m tests.mutate --target sse        # one (repeatable); --list shows them
    python -m tests.mutate --only max_tokens   # mutants whose description holds the text (repeatable)
    python -m tests.mutate --tests tests/test_matrix.py::test_sdk_reads_translation
    python -m tests.mutate --report out.md     # survivors as a markdown table

The exit status is 1 when a mutant survived.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import inspect
import os
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Target:
    module: str
    names: tuple[str, ...] | None  # maps, functions, Class.method; None: every function of the module
    tests: tuple[str, ...]
    keyword: str | None = None  # pytest -k


FINISH_MAPS = ("tests/test_finish_maps.py",)

TARGETS: dict[str, Target] = {
    "sse": Target("llmbridge.sse", None, ("tests/test_sse.py",)),
    "hub": Target(
        "llmbridge.hub",
        None,
        ("tests/test_hub.py", "tests/test_finish_maps.py", "tests/test_matrix.py::test_round_trip_keeps_hub_content"),
    ),
    "anthropic-messages": Target(
        "llmbridge.dialects.anthropic_messages._common",
        (
            "STOP_TO_HUB",
            "HUB_TO_STOP",
            "finish_from_stop",
            "stop_from_finish",
            "usage_from_raw",
            "usage_to_raw",
            "apply_usage_extra",
        ),
        FINISH_MAPS,
        "anthropic",
    ),
    "openai-chat": Target(
        "llmbridge.dialects.openai_chat._common",
        ("FINISH_FROM_WIRE", "FINISH_TO_WIRE", "usage_from_wire", "usage_to_wire"),
        FINISH_MAPS,
        "openai and chat",
    ),
    "openai-chat-encoder": Target(
        "llmbridge.dialects.openai_chat._encoder",
        ("StreamEncoder._finish", "StreamEncoder._derived", "StreamEncoder._usage_chunk"),
        FINISH_MAPS,
        "openai and chat",
    ),
    "openai-responses": Target(
        "llmbridge.dialects.openai_responses._common",
        ("INCOMPLETE_FINISH", "FINISH_INCOMPLETE", "usage_from", "usage_to"),
        FINISH_MAPS,
        "responses",
    ),
    "gemini": Target(
        "llmbridge.dialects.gemini._common",
        ("FINISH_TO_HUB", "FINISH_FROM_HUB", "finish_to_hub", "finish_from_hub", "usage_to_hub", "usage_from_hub"),
        FINISH_MAPS,
        "gemini and not interactions",
    ),
    "mmsp": Target(
        "llmbridge.unievent._items",
        ("FINISH_TO_MMSP", "FINISH_FROM_MMSP", "UsageMetadata.from_hub", "UsageMetadata.to_hub"),
        FINISH_MAPS,
        "mmsp",
    ),
    "llm-stream": Target(
        "llmbridge.dialects.llm_stream._common",
        ("STOP_REASONS", "usage_fields", "finish_fields", "finish", "finish_from"),
        FINISH_MAPS,
        "llm",
    ),
    "cohere-v2": Target(
        "llmbridge.dialects.cohere_v2._common",
        ("FINISH_TO_HUB", "FINISH_TO_WIRE", "usage_from_wire", "usage_to_wire"),
        FINISH_MAPS,
        "cohere",
    ),
    "bedrock-converse": Target(
        "llmbridge.dialects.bedrock_converse._common",
        ("STOP_TO_HUB", "HUB_TO_STOP", "usage_from_wire", "usage_to_wire", "apply_usage_rest"),
        FINISH_MAPS,
        "bedrock",
    ),
    "gemini-interactions": Target(
        "llmbridge.dialects.gemini_interactions._common",
        ("STATUS_TO_HUB", "HUB_TO_STATUS", "usage_from_wire", "usage_to_wire"),
        FINISH_MAPS,
        "interactions",
    ),
}

# The SDKs and libraries the tests import: loaded once, before the children fork.
PRELOAD = (
    "openai",
    "anthropic",
    "google.genai",
    "cohere",
    "botocore.session",
    "mmsp.mmsp.client",
    "hypothesis",
    "pytest",
    "tests.readers.sources",
    "tests.readers.mmsp",
    "tests.readers.llm_stream",
)


# ----------------------------------------------------------------------------- mutants


@dataclass
class Mutant:
    target: str
    description: str
    apply: Callable[[], None]  # run in the child: mutate the live objects


def _next_different(values: list[Any], value: Any) -> Any:
    """The first value after ``value`` (cyclically) that differs from it; ``value`` if none does."""
    start = values.index(value)
    for step in range(1, len(values)):
        other = values[(start + step) % len(values)]
        if other != value:
            return other
    return value


def map_mutants(target: str, module: types.ModuleType, name: str) -> Iterator[Mutant]:
    obj = getattr(module, name)
    if isinstance(obj, dict):
        values = list(obj.values())
        for key, value in list(obj.items()):
            # the next different value, and the map's first one: its plain end ("end_turn",
            # "stop", "STOP"), the likeliest slip (max_tokens -> end_turn)
            others = dict.fromkeys(v for v in (_next_different(values, value), values[0]) if v != value)
            for other in others:
                yield Mutant(target, f"{name}[{key!r}]: {value!r} -> {other!r}", _setter(obj, key, other))
            yield Mutant(target, f"{name}[{key!r}] removed", _remover(obj, key))
    elif isinstance(obj, (set, frozenset)):
        for member in sorted(obj, key=repr):
            smaller = type(obj)(m for m in obj if m != member)
            yield Mutant(target, f"{name} without {member!r}", _rebind(module, name, smaller))


def _setter(d: dict, key: Any, value: Any) -> Callable[[], None]:
    return lambda: d.__setitem__(key, value)


def _remover(d: dict, key: Any) -> Callable[[], None]:
    return lambda: d.__delitem__(key)


def _rebind(module: types.ModuleType, name: str, value: Any) -> Callable[[], None]:
    return lambda: setattr(module, name, value)


_FLIP: dict[type, type] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.And: ast.Or,
    ast.Or: ast.And,
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
}
_SYMBOL = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.And: "and",
    ast.Or: "or",
    ast.Add: "+",
    ast.Sub: "-",
}


def _sites(fn: ast.AST) -> Iterator[tuple[ast.AST, str, Callable[[ast.AST], ast.AST | None]]]:
    """(node, description, change) for every mutable node under ``fn``; ``change`` edits a copy
    of the node in place or returns a replacement node."""
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(fn)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    annotations = {id(sub) for n in ast.walk(fn) for a in _annotations(n) for sub in ast.walk(a)}
    for node in ast.walk(fn):
        if id(node) in annotations:  # not evaluated (from __future__ import annotations)
            continue
        if isinstance(node, ast.Compare):
            for i, op in enumerate(node.ops):
                if type(op) in _FLIP:
                    yield node, f"`{_SYMBOL[type(op)]}` -> `{_SYMBOL[_FLIP[type(op)]]}`", _op_flipper(i)
        elif isinstance(node, ast.BoolOp):
            yield node, f"`{_SYMBOL[type(node.op)]}` -> `{_SYMBOL[_FLIP[type(node.op)]]}`", _bool_flipper
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _FLIP:
            yield node, f"`{_SYMBOL[type(node.op)]}` -> `{_SYMBOL[_FLIP[type(node.op)]]}`", _bin_flipper
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "`not` dropped", lambda n: n.operand
        elif isinstance(node, ast.Constant) and id(node) not in docstrings:
            v = node.value
            if isinstance(v, bool):
                yield node, f"{v} -> {not v}", _constant(not v)
            elif isinstance(v, int):
                yield node, f"{v} -> {v + 1}", _constant(v + 1)
            elif isinstance(v, (str, bytes)) and len(v) <= 40:
                yield (
                    node,
                    f"{v!r} -> {('XX' + v + 'XX') if isinstance(v, str) else (b'XX' + v + b'XX')!r}",
                    _constant("XX" + v + "XX" if isinstance(v, str) else b"XX" + v + b"XX"),
                )


def _annotations(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.arg) and node.annotation is not None:
        return [node.annotation]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
        return [node.returns]
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


def _op_flipper(i: int) -> Callable[[ast.AST], None]:
    def change(node: ast.AST) -> None:
        assert isinstance(node, ast.Compare)
        node.ops[i] = _FLIP[type(node.ops[i])]()

    return change


def _bool_flipper(node: ast.AST) -> None:
    assert isinstance(node, ast.BoolOp)
    node.op = _FLIP[type(node.op)]()


def _bin_flipper(node: ast.AST) -> None:
    assert isinstance(node, (ast.BinOp, ast.AugAssign))
    node.op = _FLIP[type(node.op)]()


def _constant(value: Any) -> Callable[[ast.AST], None]:
    def change(node: ast.AST) -> None:
        assert isinstance(node, ast.Constant)
        node.value = value

    return change


def _functions(tree: ast.Module, names: tuple[str, ...] | None) -> Iterator[tuple[str, ast.AST]]:
    """(qualified name, def node) of the module's functions and methods, or of ``names``."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if names is None or node.name in names:
                yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    qualified = f"{node.name}.{item.name}"
                    if names is None or qualified in names:
                        yield qualified, item


def code_mutants(target: str, module: types.ModuleType, names: tuple[str, ...] | None) -> Iterator[Mutant]:
    path = Path(inspect.getfile(module))
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, str(path))
    for qualified, fn in _functions(tree, names):
        live = _live_function(module, qualified)
        if live is None:
            continue
        for n, (node, what, _change) in enumerate(_sites(fn)):
            description = f"{qualified} line {node.lineno}: {what}"
            yield Mutant(target, description, _code_swapper(tree, path, qualified, n, live))


def _live_function(module: types.ModuleType, qualified: str) -> types.FunctionType | None:
    owner: Any = module
    *path, name = qualified.split(".")
    for part in path:
        owner = getattr(owner, part, None)
    raw = (owner.__dict__ if isinstance(owner, type) else vars(owner)).get(name) if owner is not None else None
    if isinstance(raw, (staticmethod, classmethod)):
        raw = raw.__func__
    elif isinstance(raw, property):
        raw = raw.fget
    return raw if isinstance(raw, types.FunctionType) else None


def _code_swapper(tree: ast.Module, path: Path, qualified: str, n: int, live: types.FunctionType) -> Callable[[], None]:
    def apply() -> None:
        mutated = copy.deepcopy(tree)
        fn = dict(_functions(mutated, (qualified,)))[qualified]
        node, _, change = list(_sites(fn))[n]
        replacement = change(node)
        if replacement is not None:  # swap the node for its replacement in its parent
            for parent in ast.walk(fn):
                for name, value in ast.iter_fields(parent):
                    if value is node:
                        setattr(parent, name, replacement)
                    elif isinstance(value, list) and any(v is node for v in value):
                        value[next(i for i, v in enumerate(value) if v is node)] = replacement
        ast.fix_missing_locations(mutated)
        code = compile(mutated, str(path), "exec")
        new = _find_code(code, live.__code__.co_name, live.__code__.co_firstlineno)
        if new is None or new.co_freevars != live.__code__.co_freevars:
            raise RuntimeError("mutant could not be applied")
        live.__code__ = new

    return apply


def _find_code(code: types.CodeType, name: str, line: int) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name and const.co_firstlineno == line:
                return const
            found = _find_code(const, name, line)
            if found is not None:
                return found
    return None


def mutants_of(name: str, target: Target, maps_only: bool = False) -> Iterator[Mutant]:
    module = importlib.import_module(target.module)
    for item in target.names or ():
        if "." not in item and isinstance(getattr(module, item, None), (dict, set, frozenset)):
            yield from map_mutants(name, module, item)
    functions = (
        None
        if target.names is None
        else tuple(n for n in target.names if not isinstance(getattr(module, n, None), (dict, set, frozenset)))
    )
    if functions != () and not maps_only:
        yield from code_mutants(name, module, functions)


# ----------------------------------------------------------------------------- running


@dataclass
class Outcome:
    mutant: Mutant | None
    verdict: str  # killed, survived, timeout, error
    seconds: float
    detail: str = field(default="")


def run_one(mutant: Mutant | None, tests: list[str], keyword: str | None, timeout: float) -> Outcome:
    """Fork; the child applies ``mutant`` and runs pytest quietly; the parent waits at most
    ``timeout`` seconds."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child
        code = 97  # the mutant could not be applied
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            if mutant is not None:
                mutant.apply()
            code = 98  # pytest itself failed
            import pytest

            args = [*tests, "-x", "-q", "-p", "no:cacheprovider", "-W", "ignore"]
            if keyword:
                args += ["-k", keyword]
            code = int(pytest.main(args))
        except BaseException:
            pass
        finally:
            os._exit(code)
    deadline = started + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return Outcome(mutant, "timeout", time.monotonic() - started)
        time.sleep(0.05)
    seconds = time.monotonic() - started
    code = os.waitstatus_to_exitcode(status)
    # 1: a test failed; 2: collection failed (a module the tests import broke at import time)
    verdict = {0: "survived", 1: "killed", 2: "killed"}.get(code, "error")
    return Outcome(mutant, verdict, seconds, "" if verdict != "error" else f"exit {code}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", action="append", choices=sorted(TARGETS), help="a target (repeatable)")
    parser.add_argument("--only", action="append", help="mutants whose description contains this text (repeatable)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run (timeout: 15 min)")
    parser.add_argument("--tests", nargs="+", help="run these tests instead of the target's (no -k)")
    parser.add_argument("--list", action="store_true", help="list the mutants and stop")
    parser.add_argument("--maps-only", action="store_true", help="only the map entries, no code mutants")
    parser.add_argument("--report", type=Path, help="write the survivors to this markdown file")
    args = parser.parse_args(argv)

    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))
    for name in PRELOAD:
        importlib.import_module(name)
    chosen = args.target or list(TARGETS)
    outcomes: list[Outcome] = []
    started = time.monotonic()
    for name in chosen:
        target = TARGETS[name]
        mutants = [
            m
            for m in mutants_of(name, target, maps_only=args.maps_only)
            if not args.only or any(text in m.description for text in args.only)
        ]
        tests = list(args.tests or target.tests)
        keyword = None if args.tests else target.keyword
        if args.list:
            for m in mutants:
                print(f"{name}: {m.description}")
            continue
        if not mutants:
            continue
        baseline = Outcome(None, "survived", 225.0) if args.no_baseline else run_one(None, tests, keyword, 3600)
        if baseline.verdict != "survived":
            print(f"{name}: the tests fail without any mutant ({baseline.detail or baseline.verdict}); skipped")
            outcomes.append(Outcome(None, "error", baseline.seconds, f"{name}: baseline failed"))
            continue
        timeout = max(30.0, 4 * baseline.seconds)
        print(f"{name}: {len(mutants)} mutants; the tests take {baseline.seconds:.0f} s unmutated", flush=True)
        for m in mutants:
            outcome = run_one(m, tests, keyword, timeout)
            outcomes.append(outcome)
            if outcome.verdict != "killed":
                print(f"  {outcome.verdict.upper():8} {m.description} {outcome.detail}", flush=True)
    if args.list:
        return 0
    total = time.monotonic() - started
    counts = {v: sum(o.verdict == v for o in outcomes) for v in ("killed", "survived", "timeout", "error")}
    print(f"{len(outcomes)} mutants in {total / 60:.1f} min: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    if args.report:
        lines = ["| target | survived mutant |", "| --- | --- |"]
        lines += [
            f"| {o.mutant.target} | {o.mutant.description} |"
            for o in outcomes
            if o.mutant is not None and o.verdict == "survived"
        ]
        args.report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 1 if counts["survived"] or counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
