"""The embedded local models: SmolLM2-135M-Instruct in process, through llama-cpp-python, and
all-MiniLM-L6-v2 for embeddings (``embed``, numpy).

See docs/local-model.md.  The model loads at the first request (or
``await LocalUpstream().load()``).
"""

import os
import sys

# llama.cpp's CPU backend runs on OpenMP.  GNU OpenMP's default wait policy spins idle
# worker threads, and on a shared 2-core machine that spinning made batched prompt
# evaluation 5-10x slower than evaluating one token at a time (measured: 64 prompt
# tokens took 3.6 s of CPU spinning, 0.73 s passive).  libgomp reads this when it
# loads, i.e. at the first ``import llama_cpp``, so it is set here, before that.
if "llama_cpp" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
# The embedding model (``local.embed``) runs on numpy, whose bundled OpenBLAS starts one
# spinning thread per core: on the shared 2-core machine that made a batch-1 embedding 3x
# slower than one thread (5 vs 72 vectors/s, docs/local-model.md). OpenBLAS reads this once,
# when numpy loads, so it only takes effect if nothing imported numpy before us.
if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .embed import EmbeddingModel
from .upstream import LocalUpstream

__all__ = ["EmbeddingModel", "LocalUpstream"]
