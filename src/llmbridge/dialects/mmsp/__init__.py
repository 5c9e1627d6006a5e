"""MMSP (interim: the whole codec lives in ``_decoder`` until the next commit splits it)."""

from ._decoder import *  # noqa: F403
from ._decoder import __all__ as __all__
