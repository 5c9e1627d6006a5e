"""One name for the extension key: ``dialects.base.EXTENSION_KEY``.

The codecs of llm-stream, mmsp and the UniEvent view read and write the key through that
constant (llm-stream's ``llmbridge:`` field prefix is derived from it); these checks read
their source, so a literal ``"llmbridge"`` used as a key, or a namespaced field that does not
start with the derived prefix, fails here instead of drifting.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import llmbridge
from llmbridge.dialects import llm_stream
from llmbridge.dialects.base import EXTENSION_KEY

SRC = Path(llmbridge.__file__).parent
PACKAGES = ("dialects/llm_stream", "dialects/mmsp", "unievent")


def _trees(package: str) -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(encoding="utf-8"))) for p in sorted((SRC / package).glob("*.py"))]


def _used_as_key(tree: ast.Module, key: str) -> list[int]:
    """Lines where the string ``key`` is a dict key, a subscript, the key of ``.get``/``.pop``
    or the left side of ``in``: the places where it names a JSON field."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            candidates = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Subscript):
            candidates = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop"):
            candidates = node.args[:1]
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            candidates = [node.left]
        else:
            continue
        lines += [c.lineno for c in candidates if isinstance(c, ast.Constant) and c.value == key]
    return lines


@pytest.mark.parametrize("package", PACKAGES)
def test_the_extension_key_is_spelled_by_its_constant(package):
    found = {f"{p.name}:{line}" for p, tree in _trees(package) for line in _used_as_key(tree, EXTENSION_KEY)}
    assert not found, f"use base.EXTENSION_KEY, not the literal {EXTENSION_KEY!r}: {sorted(found)}"


def test_llm_stream_namespaced_fields_start_with_the_derived_prefix():
    assert llm_stream.NS == EXTENSION_KEY + ":"
    namespaced = re.compile(r"\.?(\w+):[\w:]+")  # "llmbridge:stop_reason", f"{field}.llmbridge:strict"
    wrong = []
    for path, tree in _trees("dialects/llm_stream"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                m = namespaced.fullmatch(node.value)
                if m and not node.value.lstrip(".").startswith(llm_stream.NS):
                    wrong.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert not wrong, wrong
    keys = [*llm_stream.DELTA_KEY_BY_KIND.values(), *llm_stream.KIND_BY_DELTA_KEY, llm_stream.OTHER_KIND_KEY]
    assert all(k == "text" or k.startswith(llm_stream.NS) for k in keys)
