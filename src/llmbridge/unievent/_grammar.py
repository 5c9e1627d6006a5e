"""MMSP's stream grammar as a checker: every way a UniEvent stream breaks it."""

from __future__ import annotations

from typing import Any

from ._items import UniEvent


def grammar_violations(events: list[UniEvent | dict]) -> list[str]:
    """Every way ``events`` breaks MMSP's stream grammar (an empty list when it conforms)."""
    problems: list[str] = []
    open_kind: str | None = None
    open_fidelity: Any = None
    fidelity_count = 0
    first = True
    stops = 0
    for n, event in enumerate(events):
        e = event.to_dict() if isinstance(event, UniEvent) else event
        where = f"event {n}"
        if stops:
            problems.append(f"{where}: event after stop")
        if e.get("event_type") == "stop":
            stops += 1
            if e.get("content_items"):
                problems.append(f"{where}: stop carries items")
            if not isinstance(e.get("usage_metadata"), dict):
                problems.append(f"{where}: stop without usage_metadata")
            if e.get("finish_reason") not in ("stop", "length", "tool_call", "unknown"):
                problems.append(f"{where}: bad finish_reason {e.get('finish_reason')!r}")
            if open_kind is not None:
                problems.append(f"{where}: stop while a {open_kind} group is open")
            continue
        items = e.get("content_items") or []
        if len(items) != 1:
            problems.append(f"{where}: {len(items)} items on a delta event")
            continue
        if e.get("usage_metadata") is not None or e.get("finish_reason") is not None:
            problems.append(f"{where}: usage or finish reason on a delta event")
        item = items[0]
        kind, _, phase = item["type"].rpartition(".")
        fid = item.get("fidelity")
        if phase == "delta":
            if open_kind is None:
                open_kind, open_fidelity, fidelity_count, first = kind, None, 0, True
                if kind == "tool_call" and not (item.get("name") and item.get("tool_call_id")):
                    problems.append(f"{where}: first tool_call.delta without name or tool_call_id")
            elif kind != open_kind:
                problems.append(f"{where}: {kind}.delta inside an open {open_kind} group (interleaving)")
            elif kind == "tool_call" and not first and (item.get("name") or item.get("tool_call_id")):
                problems.append(f"{where}: name/tool_call_id on a later tool_call fragment")
            first = False
            if fid is not None:
                fidelity_count += 1
                open_fidelity = fid
                if fidelity_count > 1:
                    problems.append(f"{where}: a second fragment with fidelity in one group")
        else:
            if open_kind != kind:
                problems.append(f"{where}: {kind}.done without its {kind}.delta group")
            elif fid != open_fidelity:
                problems.append(f"{where}: .done fidelity differs from the fragment's")
            if kind == "tool_call" and not isinstance(item.get("arguments"), dict):
                problems.append(f"{where}: tool_call.done arguments are not an object")
            open_kind = None
    if stops != 1:
        problems.append(f"end: {stops} stop events")
    return problems
