"""One request's generation, on the worker thread: tokens in, hub events out.

Three shapes of answer:

* ``text``  -- free text (optionally grammar-constrained for ``response_format``),
  stop sequences cut off;
* ``tool``  -- a forced call: the prompt already ends inside ``<tool_call>``; the
  name is picked under a grammar over the tool names (when there are several),
  then the arguments are generated under the tool's JSON-schema grammar;
* ``auto``  -- free text, watching for ``<tool_call>``; when the model writes it,
  the text so far is closed and the call continues as a forced one.  An answer
  whose first non-blank character is ``{`` is taken as a call too (SmolLM2-135M
  tends to answer with bare JSON rather than the tag); it is regenerated as a
  forced call, so its arguments are valid.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from .. import hub
from . import grammar as grammars
from .chat import ARGUMENTS_PREFIX, CALL_PREFIX, TOOL_CALL_OPEN
from .engine import Engine, Job
from .sampling import Sampler
from .text import Pieces, TextStream

__all__ = ["DONE", "Generation", "Plan", "RAW_FINISH", "new_call_id", "run"]

DONE = object()  # the last item a job emits

RAW_FINISH = {"end_turn": "stop", "max_tokens": "length", "stop_sequence": "stop", "tool_use": "tool_calls"}


@dataclass
class Plan:
    """Everything the worker needs, prepared (and validated) on the event loop."""

    mode: str  # "text" | "tool" | "auto"
    prompt: str  # the rendered prompt text (for "tool": ending inside the call)
    tokens: list[int]
    max_tokens: int
    stops: list[str] = field(default_factory=list)
    grammar: str | None = None  # for "text"
    tools: list[hub.Tool] = field(default_factory=list)  # candidates for "tool" / "auto"
    sampling: dict[str, Any] = field(default_factory=dict)


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


class Generation:
    def __init__(self, engine: Engine, job: Job, plan: Plan, emit: Callable[[Any], None]) -> None:
        self.engine = engine
        self.job = job
        self.plan = plan
        self.emit = emit
        self.generated = 0  # tokens the model sampled
        self.index = 0  # next block index
        if engine.pieces is None:  # one piece cache per loaded model
            engine.pieces = Pieces(engine.llm)
        self.pieces: Pieces = engine.pieces
        self._vocab = engine.llm._model.vocab

    def __call__(self) -> None:
        plan = self.plan
        try:
            if plan.mode == "tool":
                reason = self.tool_call(plan.prompt, plan.tokens)
            else:
                reason = self.text()
            if reason is None or self.job.cancelled:
                # Stopped by the client (nobody listens) or by shutdown (the client must hear it).
                self.emit(hub.Error("the local model stopped this generation", type="overloaded", status=503))
                return
            self.emit(
                hub.Usage(
                    input_tokens=len(plan.tokens),
                    output_tokens=self.generated,
                    total_tokens=len(plan.tokens) + self.generated,
                )
            )
            stop = reason[1] if reason[0] == "stop_sequence" else None
            self.emit(hub.Finish(reason[0], raw=RAW_FINISH[reason[0]], stop_sequence=stop))
        except Exception as exc:
            self.emit(hub.Error(f"local model failed: {exc}", type="api_error", status=500))
        finally:
            self.emit(DONE)

    def _sampler(self, grammar: str | None) -> Sampler:
        return Sampler(self.engine.llm, grammar=grammar, **self.plan.sampling)

    def _budget(self) -> int:
        return self.plan.max_tokens - self.generated

    # ------------------------------------------------------------------ text

    def text(self) -> tuple[str, str | None] | None:
        plan = self.plan
        auto = plan.mode == "auto"
        stream = TextStream([*plan.stops, TOOL_CALL_OPEN] if auto else plan.stops)
        index, opened, written = self.index, False, []
        emit, pieces, job, vocab = self.emit, self.pieces, self.job, self._vocab
        budget = self._budget()
        count = 0
        reason: tuple[str, str | None] = ("max_tokens", None)
        # "auto": an answer that opens with "{" is taken as a tool call (small models skip the tag).
        undecided, pending = auto, ""
        sampler = self._sampler(plan.grammar)
        try:
            for token in self.engine.tokens(plan.tokens, sampler.sample, self.job):
                if job.cancelled:
                    return None
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    reason = ("end_turn", None)
                    break
                count += 1
                text = stream.feed(pieces(token))
                if stream.stop is not None:
                    reason = ("stop_sequence", stream.stop)
                if undecided and text:
                    pending += text
                    text = ""
                    if pending.strip():
                        undecided = False
                        if pending.lstrip().startswith("{"):
                            reason = ("json_call", None)
                            break
                        text, pending = pending, ""
                if text:
                    if not opened:
                        emit(hub.BlockStart(index, "text"))
                        opened = True
                    emit(hub.Delta(index, text))
                    if auto:
                        written.append(text)
                if stream.stop is not None or count >= budget:
                    break
        finally:
            sampler.close()
            self.generated += count
        if reason[0] == "json_call":
            prompt = plan.prompt + CALL_PREFIX
            return self.tool_call(prompt, self.engine.tokenize(prompt))
        text = pending + (stream.flush() if reason[0] != "stop_sequence" else "")
        if text:
            if not opened:
                emit(hub.BlockStart(index, "text"))
                opened = True
            emit(hub.Delta(index, text))
        if opened:
            emit(hub.BlockStop(index))
            self.index += 1
        if auto and reason == ("stop_sequence", TOOL_CALL_OPEN) and TOOL_CALL_OPEN not in plan.stops:
            prompt = plan.prompt + "".join(written) + CALL_PREFIX
            return self.tool_call(prompt, self.engine.tokenize(prompt))
        return reason

    # ------------------------------------------------------------------ tool call

    def tool_call(self, prompt: str, tokens: list[int]) -> tuple[str, str | None] | None:
        """Generate one call; ``prompt`` ends with ``CALL_PREFIX`` (several tools) or with
        the single tool's name and ``ARGUMENTS_PREFIX``."""
        tools = self.plan.tools
        if len(tools) == 1:
            tool = tools[0]
            if not prompt.endswith(ARGUMENTS_PREFIX):
                tokens = self.engine.tokenize(prompt + tool.name + ARGUMENTS_PREFIX)
        else:
            picked = self._pick_name(tokens, [t.name for t in tools])
            if picked is None or isinstance(picked, tuple):
                return picked
            tool = next(t for t in tools if t.name == picked)
            prompt = prompt + tool.name + ARGUMENTS_PREFIX
            tokens = self.engine.tokenize(prompt)
        return self._arguments(tool, tokens)

    def _pick_name(self, tokens: list[int], names: list[str]) -> str | tuple[str, None] | None:
        stream = TextStream(['"'])
        sampler = self._sampler(grammars.one_of_names(names, '"'))
        name: list[str] = []
        try:
            for token in self.engine.tokens(tokens, sampler.sample, self.job):
                if self.job.cancelled:
                    return None
                self.generated += 1
                name.append(stream.feed(self.pieces(token)))
                if stream.stop is not None:
                    return "".join(name)
                if self.generated >= self.plan.max_tokens:
                    break
        finally:
            sampler.close()
        return ("max_tokens", None)

    def _arguments(self, tool: hub.Tool, tokens: list[int]) -> tuple[str, str | None] | None:
        index = self.index
        self.index += 1
        emit, pieces, job, vocab = self.emit, self.pieces, self.job, self._vocab
        emit(hub.BlockStart(index, "tool_call", id=new_call_id(), name=tool.name))
        stream = TextStream()
        held = ""
        budget = self._budget()
        count = 0
        reason: tuple[str, str | None] = ("max_tokens", None)
        sampler = self._sampler(grammars.json_schema(tool.parameters))
        try:
            for token in self.engine.tokens(tokens, sampler.sample, self.job):
                if job.cancelled:
                    return None
                if llama_cpp.llama_vocab_is_eog(vocab, token):
                    reason = ("tool_use", None)
                    break
                count += 1
                # Whitespace waits for what follows, so the grammar's optional trailing space is not sent.
                text = held + stream.feed(pieces(token))
                kept = text.rstrip()
                held = text[len(kept) :]
                if kept:
                    emit(hub.Delta(index, kept))
                if count >= budget:
                    break
        finally:
            sampler.close()
            self.generated += count
        rest = stream.flush().rstrip()
        if rest:
            emit(hub.Delta(index, rest))
        emit(hub.BlockStop(index))
        return reason


def run(plan: Plan, emit: Callable[[Any], None]) -> Callable[[Engine, Job], None]:
    """The job body for ``plan``."""
    return lambda engine, job: Generation(engine, job, plan, emit)()
