"""One layout for every dialect package (docs/architecture.md, "Adding a dialect").

A dialect that is a package has the same six files, and each holds the same things:

    __init__.py   docstring, re-exports, and only NAME (re-exported), STREAM_CONTENT_TYPE,
                  endpoint, encode_error, decode_error (and stream_encoder where there is one)
    _common.py    NAME, the maps and wire helpers the others share
    _decoder.py   StreamDecoder
    _encoder.py   StreamEncoder
    _request.py   decode_request, encode_request
    _response.py  decode_response, encode_response (non-streaming bodies)

Dialects that are still single modules are skipped, so a package added later is covered
as soon as it exists.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType

import pytest

from llmbridge import dialects
from llmbridge.dialects._contracts import SURFACE

ALL = dialects.NAMES + dialects.MORE_NAMES
FILES = ("__init__.py", "_common.py", "_decoder.py", "_encoder.py", "_request.py", "_response.py")
# What __init__ may bind itself (everything else it names is imported from its own files).
INIT_DEFINES = {
    "__all__", "STREAM_CONTENT_TYPE", "GATEWAY", "endpoint", "encode_error", "decode_error", "stream_encoder",
}  # fmt: skip
# Where each name of the surface is defined.
HOME = {
    "NAME": "_common",
    "StreamDecoder": "_decoder",
    "StreamEncoder": "_encoder",
    "decode_request": "_request",
    "encode_request": "_request",
    "decode_response": "_response",
    "encode_response": "_response",
}


def package(name: str) -> ModuleType:
    module = dialects.get(name)
    if not hasattr(module, "__path__"):
        pytest.skip(f"{name} is still a single module ({module.__name__})")
    return module


def init_tree(module: ModuleType) -> ast.Module:
    assert module.__file__ is not None
    return ast.parse(Path(module.__file__).read_text())


@pytest.mark.parametrize("name", ALL)
def test_the_package_has_the_template_files(name):
    module = package(name)
    here = Path(module.__path__[0])
    assert [f for f in FILES if not (here / f).is_file()] == []
    others = sorted(p.name for p in here.glob("*.py") if p.name not in FILES)
    assert all(f.startswith("_") for f in others), f"extra modules of a dialect package are private: {others}"


@pytest.mark.parametrize("name", ALL)
def test_init_defines_only_the_allowed_names(name):
    tree = init_tree(package(name))
    doc = ast.get_docstring(tree) or ""
    assert "terminal rule" in doc.lower(), "the package docstring says what the dialect is and its terminal rule"
    assert "_decoder" in doc and "_request" in doc, "the package docstring says which file holds what"
    defined: list[str] = []
    for node in tree.body[1:]:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.FunctionDef):
            defined.append(node.name)
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            defined += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.append(node.target.id)
        else:
            pytest.fail(f"__init__.py line {node.lineno}: only imports, assignments and functions belong here")
    assert set(defined) <= INIT_DEFINES, f"move to the package's private files: {sorted(set(defined) - INIT_DEFINES)}"
    assert {"STREAM_CONTENT_TYPE", "endpoint", "encode_error", "decode_error"} <= set(defined)


@pytest.mark.parametrize("name", ALL)
def test_the_surface_lives_in_its_file(name):
    module = package(name)
    for attr, home in HOME.items():
        owner = importlib.import_module(f"{module.__name__}.{home}")
        assert getattr(owner, attr) is getattr(module, attr), f"{attr} belongs in {home}.py"
        value = getattr(module, attr)
        if callable(value):
            assert value.__module__ == owner.__name__, f"{attr} is defined in {value.__module__}, not {home}.py"


@pytest.mark.parametrize("name", ALL)
def test_all_is_the_surface_plus_reexports(name):
    module = package(name)
    exported = module.__all__
    assert set(SURFACE) <= set(exported)
    prefix = module.__name__ + "."
    for attr in set(exported) - set(SURFACE) - INIT_DEFINES:  # extras (maps, helpers) come from the private files
        value = getattr(module, attr)
        origin = getattr(value, "__module__", None)
        if origin is None:  # a constant: find the private file that binds it
            owners = [m for m in FILES[1:] if getattr(importlib.import_module(prefix + m[:-3]), attr, None) is value]
            assert owners, f"{attr} is exported but not from the package's files"
        else:
            assert origin.startswith(prefix), f"{attr} comes from {origin}"
