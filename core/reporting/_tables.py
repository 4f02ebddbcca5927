"""Text tables as graphpass prints them: no borders, and no line ending in spaces.

rich pads every cell to its column's width, so the last column leaves spaces at the end
of most lines: noise in logs, diffs and copied output. :func:`print_trimmed` prints a
table (or any renderable, such as a summary line that wraps) with that padding cut off
(colours and styles are kept).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.segment import Segment
from rich.table import Table

__all__ = ["plain_table", "print_trimmed"]


def plain_table(*columns: str, header_style: str = "bold") -> Table:
    """A borderless table with these column headers."""
    table = Table(box=None, show_edge=False, pad_edge=False, header_style=header_style)
    for column in columns:
        table.add_column(column)
    return table


def print_trimmed(console: Console, renderable: RenderableType) -> None:
    """Print ``renderable`` (a table, a text) with no trailing spaces on its lines."""
    console.print(_Unpadded(renderable))


class _Unpadded:
    """A renderable: ``renderable``'s lines with the spaces at their ends removed."""

    def __init__(self, renderable: RenderableType):
        """Wrap ``renderable``."""
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """Render the wrapped renderable, then cut each line's trailing spaces."""
        for line in console.render_lines(self.renderable, options, pad=False):
            yield from _stripped(line)
            yield Segment.line()


def _stripped(line: Iterable[Segment]) -> Iterator[Segment]:
    segments = list(line)
    while segments:
        last = segments[-1]
        if last.control:
            break
        text = last.text.rstrip(" ")
        if text:
            segments[-1] = Segment(text, last.style, last.control)
            break
        segments.pop()
    return iter(segments)
