"""A report's parts, once for both renderings: a paragraph (str) or a Table (a title, headers, rows of cells),
laid out as plain text on stdout or as Markdown for --markdown (`render`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


def fmt(value, spec: str = ".2f", none: str = "-") -> str:
    """A number as `spec` formats it, `none` for a missing one."""
    return none if value is None else format(value, spec)


@dataclass(frozen=True)
class Table:
    """A table of a report: the line above it, its columns (headers, with `rows` lists of cells; or `same`
    columns, with `rows` the records each column's cell function reads) and its rows."""
    title: str
    columns: tuple
    rows: list


def same(header: str, cell: Callable[[object], str]) -> tuple:
    """A column: its header and how a record fills its cell."""
    return header, cell


def snapshot_lines(snapshots: dict, line: Callable[[str, dict], str]) -> list[str]:
    """One line per snapshot of what auto learned: `line(when, snapshot)`, or why it is unavailable."""
    return [f"{when}: {e['unavailable']}" if "unavailable" in e else line(when, e) for when, e in snapshots.items()]


def table(headers, rows: list[list[str]]) -> str:
    """Plain text, right-aligned, a rule under the headers."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def markdown_table(headers, rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def render(parts, markdown: bool = False) -> str:
    """A report's parts in order, each a paragraph (str) or a Table, as plain text (stdout) or Markdown."""
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        headers, rows = part.columns, part.rows
        if headers and isinstance(headers[0], tuple):
            headers, rows = [h for h, _ in part.columns], [[cell(r) for _, cell in part.columns] for r in rows]
        laid = (markdown_table if markdown else table)(headers, rows)
        out.append(f"{part.title}{chr(10) * (2 if markdown else 1)}{laid}" if part.title else laid)
    return "\n\n".join(out)
