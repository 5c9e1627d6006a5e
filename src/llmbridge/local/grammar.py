"""GBNF grammars that constrain the local model: JSON schemas, any JSON object, tool names."""

from __future__ import annotations

import functools
import json
from typing import Any

from llama_cpp import llama_grammar

__all__ = ["EMPTY_OBJECT_SCHEMA", "JSON_OBJECT", "json_schema", "one_of_names"]

# Any JSON object (``response_format: json_object``) -- llama.cpp's stock JSON grammar, rooted at an object.
JSON_OBJECT = llama_grammar.JSON_GBNF

EMPTY_OBJECT_SCHEMA = {"type": "object", "properties": {}}


def _literal(text: str) -> str:
    """A GBNF string literal."""
    return json.dumps(text, ensure_ascii=False)


@functools.lru_cache(maxsize=128)
def _schema_grammar(schema_json: str) -> str:
    return llama_grammar.json_schema_to_gbnf(schema_json)


def json_schema(schema: dict[str, Any] | None) -> str:
    """A grammar for JSON values valid against ``schema`` (cached by the schema's JSON text).

    Raises ``ValueError`` for a schema the converter does not support.  An object schema with
    ``properties: {}`` and no ``additionalProperties`` allows only ``{}``: a tool without
    parameters gets no invented arguments.
    """
    schema = schema or EMPTY_OBJECT_SCHEMA
    try:
        return _schema_grammar(json.dumps(schema, sort_keys=True))
    except Exception as exc:  # the converter raises bare exceptions for unsupported keywords
        raise ValueError(f"unsupported JSON schema: {exc}") from exc


def one_of_names(names: list[str], suffix: str) -> str:
    """Exactly one of ``names`` followed by ``suffix`` (to pick a tool by name)."""
    choices = " | ".join(_literal(name) for name in names)
    return f"root ::= ({choices}) {_literal(suffix)}\n"
