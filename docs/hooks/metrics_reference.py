"""MkDocs hook: the metrics reference, generated from compactor/observe/metrics/declared.py.

`docs/operating/metrics.md` holds the prose and one marker line, `<!-- metrics-reference -->`. At
build time the marker becomes one table per section of the declarations: every metric the job
exports with its kind, labels and help, so the page cannot drift from what `/metrics` serves.
"""

from __future__ import annotations

from typing import Any

from compactor.observe.metrics.declared import METRICS, SECTIONS, Declared

MARKER = "<!-- metrics-reference -->"


def _row(m: Declared) -> str:
    labels = ", ".join(f"`{label}`" for label in m.labels) or "-"
    text = " ".join(m.help.split()).replace("|", "\\|")
    return f"| `{m.exported}` | {m.kind} | {labels} | {text} |"


def render() -> str:
    """One heading and table per section, in the declarations' order."""
    out: list[str] = []
    for section in SECTIONS:
        out += [f"### {section}", "", "| metric | kind | labels | what |", "|---|---|---|---|"]
        out += [_row(m) for m in METRICS if m.section == section]
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs calls this for every page: the page with the marker gets the reference."""
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
