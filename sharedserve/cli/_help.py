"""``--help`` that cuts no flag's name in a terminal of 80 columns.

typer lays each panel of options out as a rich table (names, negative names, type, help) whose
columns, when the table is wider than the terminal, all shrink alike: at 80 columns
``--model-config-file-poll-wait-seconds`` came out as ``--model-config-fi…``, beside help text
wrapped a word a line. Here every column but the last (the help) keeps its width, so the help
alone wraps into what is left. Long lists are split into panels (``rich_help_panel``) so that a
panel's longest name sets its help's width, not the command's.

typer builds those tables with the ``Table`` its ``rich_utils`` module imported and offers no
setting for this; ``keep_flag_names_whole`` gives that module a ``Table`` whose columns do it.
``tests/integration/test_help_width.py`` reads every command's help in an 80-column terminal,
so a typer that renders differently is caught there.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text
from typer import rich_utils

__all__ = ["keep_flag_names_whole"]


class _WholeNames(Table):
    """A rich table in which only the last column (a help text) wraps or shrinks; an option's
    negative name (``--no-live``) stands under its name, not in a column of its own; a long list
    of choices takes a line each; and a column empty in every row takes no room."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        cells = list(renderables)
        if len(cells) in (_OPTION_CELLS, _OPTION_CELLS + 1):  # an option's row, not a command's
            first = len(cells) - _OPTION_CELLS  # 1 where a "required" mark leads
            for name, negative in ((first, first + 2), (first + 1, first + 3)):
                if _shows(cells[negative]):
                    shown = [c for c in (cells[name], cells[negative]) if _shows(c)]
                    cells[name] = Text("\n").join(map(_text, shown))
                    cells[negative] = ""
            cells[-2] = _choices_apart(cells[-2])
        super().add_row(*cells, **kwargs)
        for column in self.columns[:-1]:
            column.no_wrap = True

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self.columns = [c for c in self.columns if any(map(_shows, c.cells))]
        yield from super().__rich_console__(console, options)


# typer's row for an option: names, short names, negative names, negative short names, type,
# help; led by a "required" mark when any option of the panel is required.
_OPTION_CELLS = 6


# A type longer than this that lists choices (<sequential|parallel|poisson>) takes a line per
# choice, not the width of all of them.
_LONG_TYPE = 16


def _choices_apart(cell: object) -> object:
    if not isinstance(cell, Text) or len(cell.plain) <= _LONG_TYPE or "|" not in cell.plain:
        return cell
    return Text("\n").join(cell.split("|", include_separator=True))


def _text(cell: object) -> Text:
    return cell if isinstance(cell, Text) else Text(str(cell))


def _shows(cell: object) -> bool:
    return not isinstance(cell, (str, Text)) or bool(str(cell))


def keep_flag_names_whole() -> None:
    """From now on, typer's help panels keep option names, negative names and types whole."""
    rich_utils.Table = _WholeNames  # type: ignore[attr-defined]
