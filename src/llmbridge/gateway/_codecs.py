"""The dialect modules as the gateway uses them: typed by their contract.

:func:`llmbridge.dialects.get` returns a plain module, whose every attribute is ``Any`` to a
type checker; :func:`codec` returns the same module as a
:class:`~llmbridge.dialects.base.DialectModule`, so the gateway's calls into a codec
(``decode_request``, ``encode_response``, ``endpoint``, ``StreamDecoder()`` ...) are checked.
"""

from __future__ import annotations

from typing import cast

from .. import dialects
from ..dialects.base import DialectModule, missing_surface

__all__ = ["codec"]

_CHECKED: dict[str, DialectModule] = {}


def codec(name: str) -> DialectModule:
    """Dialect ``name``'s module; ``KeyError`` (naming the known dialects) for an unknown name.

    The first call per dialect checks that the module has the whole surface and raises
    ``TypeError`` naming what is missing (a broken dialect; the contract test finds it
    first); later calls are one dict lookup, as :func:`llmbridge.dialects.get` is.
    """
    checked = _CHECKED.get(name)
    if checked is not None:
        return checked
    module = dialects.get(name)
    missing = missing_surface(module)
    if missing:
        raise TypeError(f"dialect {name!r} lacks {', '.join(missing)}")
    # missing_surface just found every member of DialectModule on the module: the cast says so.
    checked = _CHECKED[name] = cast(DialectModule, module)
    return checked
