"""mypy for ``make lint``: strict modules clean, every other module at or under its baseline.

The strict modules are those the ``[[tool.mypy.overrides]]`` of pyproject.toml make strict
(the one list: see :func:`strict_files`); ``mypy-baseline.json`` holds the error count of
every other file when the baseline was taken.  The check fails when
a strict module has any error or a file has more errors than its baseline (a file not in the
baseline must be clean), and says which; a file with fewer errors is reported so the
baseline can be lowered with ``--update``, which never raises a count already there (it
records a new file's count, for a deliberate acceptance at a merge).

Usage::

    python scripts/mypy_baseline.py           # check (exit 1 on growth)
    python scripts/mypy_baseline.py --update  # write the lower counts to mypy-baseline.json
    python scripts/mypy_baseline.py --reset   # take today's counts as they are (a merge that
                                              # brings errors in on purpose; say so in its commit)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "mypy-baseline.json"
_ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+: error: ")


def strict_files(root: Path = ROOT) -> tuple[str, ...]:
    """The files under ``root/src`` (as paths relative to ``root``) whose module the mypy
    overrides of ``root/pyproject.toml`` make strict.

    An override with ``disallow_untyped_defs = true`` marks its modules strict, one with
    ``false`` carves modules out again.  Where several patterns match a module, mypy's own
    precedence decides: the exact name, else the longest ``pkg.*`` (which matches ``pkg``
    itself and everything under it).
    """
    mypy = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mypy"]
    rules: list[tuple[str, bool]] = []
    for override in mypy.get("overrides", []):
        flag = override.get("disallow_untyped_defs")
        if flag is None:
            continue
        modules = override["module"]
        rules += [(m, bool(flag)) for m in ([modules] if isinstance(modules, str) else modules)]
    src = root / "src"
    found = []
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        best, strict = -1, False
        for pattern, flag in rules:
            if pattern == module:
                rank = 1 << 30  # an exact name beats every glob
            elif pattern.endswith(".*") and (module == pattern[:-2] or module.startswith(pattern[:-1])):
                rank = len(pattern)
            else:
                continue
            if rank > best:
                best, strict = rank, flag
        if strict:
            found.append(path.relative_to(root).as_posix())
    return tuple(found)


def counts() -> Counter[str]:
    """Errors per file from a mypy run with the pyproject configuration."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--no-color-output"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode not in (0, 1):  # 2: mypy itself failed (bad config, crash)
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(2)
    found: Counter[str] = Counter()
    for line in result.stdout.splitlines():
        m = _ERROR.match(line)
        if m:
            found[m["path"]] += 1
    return found


def main(argv: list[str]) -> int:
    """Check, or with ``--update`` lower the baseline (``--reset``: rewrite it); the exit status."""
    found = counts()
    strict = strict_files()
    baseline: dict[str, int] = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    if "--update" in argv or "--reset" in argv:
        keep_lower = "--update" in argv and baseline
        new = {p: min(n, baseline.get(p, n)) if keep_lower else n for p, n in sorted(found.items()) if p not in strict}
        BASELINE.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
        print(f"mypy baseline: {sum(new.values())} errors in {len(new)} files")
        return 0
    problems = [f"{p}: {found[p]} mypy errors in a strict module (0 allowed)" for p in strict if found[p]]
    problems += [
        f"{p}: {n} mypy errors, baseline {baseline.get(p, 0)}"
        for p, n in sorted(found.items())
        if p not in strict and n > baseline.get(p, 0)
    ]
    lower = [p for p, n in baseline.items() if found.get(p, 0) < n]
    total = sum(n for p, n in found.items() if p not in strict)
    if problems:
        print("mypy: errors grew (run `mypy` for the details):\n  " + "\n  ".join(problems))
        return 1
    note = f"; {len(lower)} file(s) below their baseline: `python scripts/mypy_baseline.py --update`" if lower else ""
    held = sum(baseline.values())
    print(f"mypy: {len(strict)} strict modules clean; {total} errors elsewhere, baseline {held}{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
