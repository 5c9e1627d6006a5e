"""The conformance report as text, JSON and JUnit XML."""

from __future__ import annotations

import json
from xml.etree import ElementTree as ET

from ._runner import Report

__all__ = ["to_json", "to_junit", "to_text"]

_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}


def to_text(report: Report) -> str:
    """A readable report: one line per check, failure details indented, a summary last."""
    lines = [f"LLM-Stream 1.0 conformance: {report.url} (model {report.model})", ""]
    for r in report.results:
        c = r.check
        lines.append(f"{_MARK[r.status]}  {c.level:<6} {c.section:<6} {c.id:<28} {c.title}")
        if r.status != "pass":
            lines += [f"        {d}" for d in r.details[:5]]
    counts = {s: sum(1 for r in report.results if r.status == s) for s in ("pass", "fail", "skip")}
    must = len(report.must_failures)
    lines += [
        "",
        f"{counts['pass']} passed, {counts['fail']} failed ({must} MUST), {counts['skip']} skipped",
        "CONFORMS (no MUST failure)" if report.ok else "DOES NOT CONFORM",
    ]
    return "\n".join(lines)


def to_json(report: Report) -> str:
    """``{"url", "model", "conforms", "results": [{"id", "section", "level", "title", "status", "details"}]}``."""
    return json.dumps(
        {
            "url": report.url,
            "model": report.model,
            "conforms": report.ok,
            "results": [r.to_dict() for r in report.results],
        },
        ensure_ascii=False,
        indent=2,
    )


def to_junit(report: Report) -> bytes:
    """JUnit XML: one ``testsuite``, one ``testcase`` per check (SHOULD failures as ``failure`` too,
    typed ``SHOULD`` so a CI can tell them apart)."""
    results = report.results
    suite = ET.Element(
        "testsuite",
        name="llm-stream-conformance",
        tests=str(len(results)),
        failures=str(sum(1 for r in results if r.status == "fail")),
        skipped=str(sum(1 for r in results if r.status == "skip")),
        errors="0",
    )
    ET.SubElement(ET.SubElement(suite, "properties"), "property", name="url", value=report.url)
    for r in results:
        c = r.check
        case = ET.SubElement(suite, "testcase", classname=f"llm-stream.{c.level}", name=f"{c.section} {c.id}")
        if r.status == "fail":
            failure = ET.SubElement(case, "failure", type=c.level, message=f"{c.level}: {c.title}")
            failure.text = "\n".join(r.details)
        elif r.status == "skip":
            ET.SubElement(case, "skipped", message="; ".join(r.details))
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
