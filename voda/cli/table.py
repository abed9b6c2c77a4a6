"""Plain column tables, the way kubectl prints them: a header row of names, left-aligned
columns three spaces apart, no borders, no colour.

Client commands print with this rather than rich: importing and laying out a rich table
costs about 150 ms, half of a command's budget (bench/cli_startup.py). Names are never
cut; a long cell widens its column.
"""

from __future__ import annotations

import sys
from typing import TextIO

GAP = "   "


class Table:
    """Columns named at construction, rows added with `add_row`; `title` above the
    table, `caption` below it; `show_header=False` for a key/value list."""

    def __init__(self, *columns: str, title: str | None = None, caption: str | None = None,
                 show_header: bool = True) -> None:
        self.columns = list(columns)
        self.title = title
        self.caption = caption
        self.show_header = show_header
        self.rows: list[list[str]] = []

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of "
                             f"{len(self.columns)} columns")
        self.rows.append([str(c) for c in cells])

    def lines(self) -> list[str]:
        shown = ([self.columns] if self.show_header and self.columns else []) + self.rows
        lines = [self.title] if self.title else []
        if shown:
            widths = [max(len(row[i]) for row in shown) for i in range(len(shown[0]))]
            lines += [GAP.join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                      for row in shown]
        if self.caption:
            lines.append(self.caption)
        return lines

    def render(self) -> str:
        return "".join(line + "\n" for line in self.lines())

    def print(self, stream: TextIO | None = None) -> None:
        (stream or sys.stdout).write(self.render())


def say(text: str = "") -> None:
    """One line on standard output, as written (no markup, no wrapping)."""
    sys.stdout.write(text + "\n")
