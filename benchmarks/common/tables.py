"""Tables, once for both renderings: a table is a list of columns, each with its header in the plain-text table
(stdout) and in the Markdown one (`--markdown`), and how a row fills its cell in each; `lines()` picks one
rendering, `table()` and `markdown_table()` lay it out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


def fmt(value, spec: str = ".2f", none: str = "-") -> str:
    """A number as `spec` formats it, `none` for a missing one."""
    return none if value is None else format(value, spec)


@dataclass(frozen=True)
class Column:
    text: str | None                      # header on stdout; None: the column is not on stdout
    md: str | None                        # header in Markdown; None: the column is not in Markdown
    cell: Callable[[object], str]         # row -> its cell (both renderings)
    md_cell: Callable[[object], str] | None = None     # row -> its Markdown cell, where that one differs


def same(header: str, cell: Callable[[object], str]) -> Column:
    """A column with one header and one cell in both renderings."""
    return Column(header, header, cell)


def field(key: str, spec: str = ".2f", under: str = "prediction") -> Callable[[dict], str]:
    """A cell that formats row[under][key]."""
    return lambda r: fmt(r[under][key], spec)


def snapshot_lines(snapshots: dict, line: Callable[[str, dict], str]) -> list[str]:
    """One line per snapshot of what auto learned: `line(when, snapshot)`, or why it is unavailable."""
    return [f"{when}: {e['unavailable']}" if "unavailable" in e else line(when, e) for when, e in snapshots.items()]


def lines(columns, rows, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """(headers, one line of cells per row) of the columns that the rendering has."""
    shown = [c for c in columns if (c.md if markdown else c.text) is not None]
    headers = [c.md if markdown else c.text for c in shown]
    return headers, [[(c.md_cell or c.cell)(r) if markdown else c.cell(r) for c in shown] for r in rows]


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Plain text, right-aligned, a rule under the headers."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(out)


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def render(headers_and_lines: tuple[list[str], list[list[str]]], markdown: bool = False) -> str:
    return (markdown_table if markdown else table)(*headers_and_lines)
