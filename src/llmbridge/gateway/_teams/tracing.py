"""OpenTelemetry spans for requests, following the GenAI semantic conventions.

One span per request, ``chat {model}``, kind CLIENT (the gateway calls a model on the
client's behalf), from the request's arrival to the end of its answer, with
``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.*``,
``gen_ai.response.finish_reasons``, ``gen_ai.usage.input_tokens``/``output_tokens`` and
``error.type``. Prompt text is never recorded unless ``trace_content = true``; then
``gen_ai.input.messages`` holds the request's messages (text parts only).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ... import hub

if TYPE_CHECKING:  # imported where used: OpenTelemetry's import costs nothing until spans are on
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = ["PROVIDER", "end_span", "otlp_provider", "start_span"]

# gen_ai.provider.name values for the formats an upstream can speak
PROVIDER = {
    "openai-chat": "openai",
    "openai-responses": "openai",
    "anthropic-messages": "anthropic",
    "gemini": "gcp.gemini",
    "local": "llmbridge.local",
}


def otlp_provider(endpoint: str) -> TracerProvider:
    """A TracerProvider exporting over OTLP/HTTP to ``endpoint`` (batched, off the hot path).

    Raises RuntimeError when the OTLP exporter package is not installed.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise RuntimeError("otlp_endpoint is set but opentelemetry-exporter-otlp-proto-http is not installed") from exc
    provider = TracerProvider(resource=Resource.create({"service.name": "llmbridge"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")))
    return provider


def start_span(tracer: Tracer, hreq: hub.Request, start_ns: int, content: bool) -> Span:
    """The request's span, started at ``start_ns`` (epoch nanoseconds)."""
    from opentelemetry.trace import SpanKind

    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat"}
    if hreq.model:
        attrs["gen_ai.request.model"] = hreq.model
    for name, value in (
        ("max_tokens", hreq.max_tokens),
        ("temperature", hreq.temperature),
        ("top_p", hreq.top_p),
        ("top_k", hreq.top_k),
        ("seed", hreq.seed),
    ):
        if value is not None:
            attrs[f"gen_ai.request.{name}"] = value
    if hreq.stop:
        attrs["gen_ai.request.stop_sequences"] = list(hreq.stop)
    if content:
        messages = [{"role": m.role, "content": m.text} for m in hreq.messages]
        attrs["gen_ai.input.messages"] = json.dumps(messages, ensure_ascii=False)
    return tracer.start_span(f"chat {hreq.model}", kind=SpanKind.CLIENT, start_time=start_ns, attributes=attrs)


def end_span(
    span: Span,
    *,
    upstream: str | None,
    upstream_format: str | None,
    upstream_model: str | None,
    usage: hub.Usage | None,
    finish: hub.Finish | None,
    error_type: str | None,
    key_id: str | None,
    end_ns: int,
) -> None:
    from opentelemetry.trace import Status, StatusCode

    if upstream_format:
        span.set_attribute("gen_ai.provider.name", PROVIDER.get(upstream_format, upstream_format))
    if upstream_model:
        span.set_attribute("gen_ai.response.model", upstream_model)
    if upstream:
        span.set_attribute("llmbridge.upstream", upstream)
    if key_id:
        span.set_attribute("llmbridge.key_id", key_id)
    if usage is not None:
        if usage.input_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        if usage.output_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    if finish is not None:
        span.set_attribute("gen_ai.response.finish_reasons", [finish.reason])
    if error_type:
        span.set_attribute("error.type", error_type)
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=end_ns)
