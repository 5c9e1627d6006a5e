"""scripts/mypy_baseline.py: the strict modules come from pyproject's mypy overrides (one list)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("mypy_baseline", ROOT / "scripts" / "mypy_baseline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree(root: Path, overrides: str) -> None:
    for name in (
        "pkg/__init__.py",
        "pkg/a.py",
        "pkg/b.py",
        "pkg/sub/__init__.py",
        "pkg/sub/c.py",
        "pkg/sub/d.py",
        "pkg/subway.py",
        "other.py",
    ):
        path = root / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (root / "pyproject.toml").write_text("[tool.mypy]\nfiles = ['src']\n" + overrides)


def test_a_glob_covers_the_package_and_an_exact_name_carves_out(script, tmp_path):
    _tree(
        tmp_path,
        """
[[tool.mypy.overrides]]
module = ["pkg.*", "other"]
disallow_untyped_defs = true

[[tool.mypy.overrides]]
module = "pkg.sub.d"
disallow_untyped_defs = false
""",
    )
    assert script.strict_files(tmp_path) == (
        "src/other.py",
        "src/pkg/__init__.py",
        "src/pkg/a.py",
        "src/pkg/b.py",
        "src/pkg/sub/__init__.py",
        "src/pkg/sub/c.py",
        "src/pkg/subway.py",
    )


def test_the_longest_glob_wins_and_a_prefix_is_not_a_package(script, tmp_path):
    _tree(
        tmp_path,
        """
[[tool.mypy.overrides]]
module = "pkg.*"
disallow_untyped_defs = true

[[tool.mypy.overrides]]
module = "pkg.sub.*"
disallow_untyped_defs = false

[[tool.mypy.overrides]]
module = "pkg.sub.c"
disallow_untyped_defs = true

[[tool.mypy.overrides]]
module = "pkg.a"
ignore_errors = false
""",
    )
    # pkg.sub.* (longer) turns pkg.sub off, the exact pkg.sub.c back on; "pkg.subway" is not
    # under "pkg.sub"; an override without disallow_untyped_defs says nothing about strictness.
    assert script.strict_files(tmp_path) == (
        "src/pkg/__init__.py",
        "src/pkg/a.py",
        "src/pkg/b.py",
        "src/pkg/sub/c.py",
        "src/pkg/subway.py",
    )


def test_the_repository_strict_list_holds_what_issue_12_asks_for(script):
    strict = set(script.strict_files())
    for module in (
        "sse",
        "hub",
        "dialects/base",
        "gateway/__init__",
        "gateway/_app",
        "gateway/_streaming",
        "gateway/_teams/core",
        "gateway/_ui/_routes",
    ):
        assert f"src/llmbridge/{module}.py" in strict
