"""The UniEvent view (interim: the whole module lives in ``_view`` until the next commit splits it)."""

from ._view import *  # noqa: F403
from ._view import __all__ as __all__
